"""A scripted OpenAI-compatible server: fixed replies chosen by rules, no model.

It isolates everything around the model: tests use it to drive the agent and the outer
loops through exact replies (including malformed ones and server errors), and benchmarks
use it as an instant endpoint to measure the harness's own overhead. It speaks the same
``/v1/chat/completions`` protocol as the real servers and runs as its own process on
127.0.0.1, started and stopped by PID like the embedded server.

Rules file (JSON): ``[{"match": "substring", "reply": "text"} | {"match": "...", "status": 500}]``
(a failing rule may carry ``"error": "message"``, e.g. a server's context-overflow wording).
The first rule whose ``match`` occurs in the request's messages (all of them, joined) wins;
a rule with ``"over_chars": N`` applies only to messages longer than N characters (with a
``"status": 400`` and the server's overflow wording, a stand-in for a context of that size);
a rule may carry ``"replies": [...]`` to cycle through several texts, one per request seed
(``scripted_rules.py``: the two arms of a paired replay get the same replies), ``"delay_s"`` to
answer after a pause (a stand-in for model latency in tests and benchmarks), ``"times": N``
to apply to its first N matches only, ``"every": N`` to apply to every Nth match only (the
others fall through to the next rule) and ``"headers"`` to add to its answer (a 429 with
``{"Retry-After": "1"}``) and ``"free"``: what the model says when nothing in the request constrains
its decoding, answered instead of ``reply`` then. Which fields constrain is the imitated server's
rule: here llama.cpp's (its server README, tools/server: ``grammar``, ``json_schema`` and a
``response_format`` JSON schema; anything else, vLLM's ``structured_outputs`` included, is
ignored), ``scripted_vllm`` and ``scripted_provider`` have their own. A reply may be an object
``{"tool_calls": [{"name": ..., "arguments": {...}}]}``:
the answer is then a tool call as OpenAI's chat-completions API returns one (``message.content``
null, ``message.tool_calls[].function.arguments`` a JSON string, ``finish_reason: "tool_calls"``;
platform.openai.com/docs/guides/function-calling). Fault rules for what a real endpoint does under load: a
``"status"`` (500, 429 with ``Retry-After``), a ``"delay_s"`` past the client's timeout, and
``"drop": true``, which closes the connection without an answer (a dropped connection). During a
``delay_s`` its llama.cpp ``GET /slots`` shows the request processing, hung, or decoding at ``"decode_tps"``
tokens a second (``scripted_slots.py``), as a slow server shows progress.

Without a provider it is a llama.cpp server in what it refuses and serves besides the chat route
(tools/server/README.md and server-common.cpp of llama.cpp): ``llama_cpp_refusal``, ``GET /props``
and ``GET /lora-adapters``, and ``/v1/embeddings`` only when started for embeddings (the file's
``"embeddings": true``, llama-server's ``--embeddings``; else 501, ``llama_cpp_no_embeddings``).

The file may instead be ``{"rules": [...], "provider": {...}}``: the server then also enforces
what a hosted provider enforces before any rule is consulted (``scripted_provider.py``: served models,
the API key, refused and mutually exclusive parameters, OpenAI's strict-schema rules), with
that provider's error shapes, and with ``tool_calling`` what that server does with tool calls
(``scripted_tools.py``: ``tool_choice``, ``parallel_tool_calls``, the pairing of calls and tool
messages, its id format, llama.cpp's ``--jinja``). ``--log FILE`` appends every request (time, headers, body) as
one JSON line, for tests that check what was sent and when. ``POST /scripted/reload`` (this
stand-in's own route, like vLLM stand-in's ``/scripted/requests``) swaps the rules, provider and
request log of a running server, so a test suite reuses one process across tests.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import struct
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from automem_dagster.llm.process import ServerProcess, free_port
from automem_dagster.standins.scripted_provider import Provider
from automem_dagster.standins.scripted_rules import Rules, llama_cpp_constrains
from automem_dagster.standins.scripted_slots import Slots
from automem_dagster.standins.scripted_tools import call_id


def llama_cpp_refusal(body: dict) -> tuple[int, dict] | None:
    """What llama.cpp's server refuses before decoding (``oaicompat_chat_params_parse``,
    tools/server/server-common.cpp, ggml-org/llama.cpp master as of 2026-10): a top-level ``json_schema``
    together with a ``grammar`` (``std::runtime_error``, which its HTTP layer answers 500 ``server_error``),
    and a ``response_format`` type other than ``text``, ``json_object`` and ``json_schema``
    (``std::invalid_argument``: 400 ``invalid_request_error``)."""
    if body.get("json_schema") is not None and body.get("grammar"):
        return 500, {"error": {"code": 500, "message": "Cannot use both json_schema and grammar", "type": "server_error"}}
    kind = (body.get("response_format") or {}).get("type") or ""
    if kind not in ("", "text", "json_object", "json_schema"):
        return 400, {"error": {"code": 400, "message": 'response_format type must be one of "text" or "json_object", '
                               f"but got: {kind}", "type": "invalid_request_error"}}
    return None


def llama_cpp_props() -> dict:
    """``GET /props`` as llama.cpp's server answers it (tools/server/README.md, "GET /props"): the
    fields the project reads (``model_path``, ``build_info``) and the slots."""
    return {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1, "model_path": "scripted.gguf",
            "chat_template": "", "build_info": "b0-scripted"}


def llama_cpp_adapters(lora: list[dict]) -> list[dict]:
    """``GET /lora-adapters`` (tools/server/README.md): every adapter the server was started with by
    ``--lora``, as ``{"id", "path", "scale"}``; ``--lora-init-without-apply`` starts them at scale 0,
    else at 1, which applies them to every request that names no ``lora`` of its own."""
    return [{"id": i, "path": a["path"], "scale": float(a.get("scale", 1.0))} for i, a in enumerate(lora)]


def llama_cpp_no_embeddings() -> tuple[int, dict]:
    """llama.cpp's answer to ``POST /v1/embeddings`` on a server started without ``--embeddings``:
    ``handle_embeddings_impl`` in tools/server/server.cpp of ggml-org/llama.cpp (server-context.cpp
    after the 2026 split) refuses with ``ERROR_TYPE_NOT_SUPPORTED``, which ``format_error_response``
    makes HTTP 501 ``not_supported_error``. The body is the one the installed xllamacpp 2026.10.11549
    answers the embedded model with, checked on 2026-12-04."""
    return 501, {"error": {"code": 501, "message": "This server does not support embeddings. Start it with `--embeddings`",
                           "type": "not_supported_error"}}


def _completion(body: dict, reply: str | dict, request: int, server: str | None = None) -> dict:
    """A chat completion answering ``body`` with ``reply`` (text, or tool calls with ids in ``server``'s format)."""
    message, finish = _message(reply, request, server)
    return {"id": "scripted", "object": "chat.completion", "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": finish, "message": message}], "usage": _usage(body, message)}


def _message(reply: str | dict, request: int, server: str | None) -> tuple[dict, str]:
    """The assistant message and finish reason for a rule's reply: text, or tool calls."""
    if isinstance(reply, dict) and "tool_calls" in reply:
        calls = [{"id": call_id(server, request, i), "type": "function", "function": {
            "name": call["name"], "arguments": call["arguments"] if isinstance(call["arguments"], str)
            else json.dumps(call["arguments"])}} for i, call in enumerate(reply["tool_calls"])]
        return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"
    return {"role": "assistant", "content": reply}, "stop"


def _usage(body: dict, message: dict) -> dict:
    """Tokens as characters / 4: of every message and of the tool definitions (a server renders
    them into the prompt), and of the reply's text or tool calls."""
    prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
    prompt += len(json.dumps(body["tools"])) if body.get("tools") else 0
    reply = len(json.dumps(message["tool_calls"])) if "tool_calls" in message else len(message["content"])
    return {"prompt_tokens": prompt // 4, "completion_tokens": reply // 4, "total_tokens": (prompt + reply) // 4}


EMBED_DIMS = 64


def word_vector(text: str) -> list[float]:
    """The stand-in's embedding of ``text``: hashed word counts, unit length (all zeros for no words)."""
    counts = [0.0] * EMBED_DIMS
    for word in re.findall(r"\w+", text.lower()):
        counts[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % EMBED_DIMS] += 1.0
    norm = sum(c * c for c in counts) ** 0.5
    return [c / norm for c in counts] if norm else counts


def _embeddings(body: dict) -> tuple[int, dict]:
    """(status, payload) of an embeddings request."""
    texts = body.get("input")
    texts = [texts] if isinstance(texts, str) else texts
    fmt = body.get("encoding_format", "float")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
        return 400, {"error": {"message": "Input content cannot be empty (a string or a list of non-empty strings)",
                               "type": "invalid_request_error"}}
    if fmt not in ("float", "base64"):
        return 400, {"error": {"message": f"encoding_format {fmt!r}: Can be either float or base64",
                               "type": "invalid_request_error"}}
    data = []
    for i, text in enumerate(texts):
        vector = word_vector(text)
        value = vector if fmt == "float" else base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = sum(len(t) for t in texts) // 4
    return 200, {"object": "list", "model": body.get("model", "scripted"), "data": data,
                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


KEEP_ALIVE_S = 5.0
"""Seconds an idle kept-alive connection stays open: uvicorn's default ``--timeout-keep-alive``."""


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: dict | list, headers: dict | None = None) -> None:
    """One JSON answer with its Content-Length, which a kept-alive HTTP/1.1 connection needs."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, str(value))
    handler.end_headers()
    handler.wfile.write(data)


SLOTS = Slots()
"""The answers this stand-in process has under way, for its llama.cpp ``GET /slots``."""


def get_route(route: str, provider: Provider | None, llama_cpp: bool) -> tuple[int, dict | list]:
    """(status, JSON) of a GET: health, the served models, and llama.cpp's ``/props``, ``/lora-adapters`` and ``/slots``."""
    if route in ("/health", "/v1/health"):
        return 200, {"status": "ok"}
    if llama_cpp and route == "/slots":
        return 200, SLOTS.listing()
    if llama_cpp and route == "/props":
        return 200, llama_cpp_props()
    if llama_cpp and route == "/lora-adapters":
        return 200, llama_cpp_adapters(provider.lora if provider is not None else [])
    if route == "/v1/models":
        names = provider.models if provider and provider.models else ["scripted"]
        return 200, {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
    return 404, {"error": {"message": f"no route {route}"}}


# Keep-alive, as the servers imitated answer: vLLM's uvicorn keeps an HTTP/1.1 connection open after
# a response unless told ``Connection: close`` (uvicorn docs, server-behavior.md "HTTP Headers"),
# closing it after ``--timeout-keep-alive`` idle seconds (default 5), and llama.cpp's cpp-httplib server
# keeps connections alive too. Every answer carries Content-Length (``_send``), which HTTP/1.1 needs.
# Before, the handler's default HTTP/1.0 closed each connection, so every call paid a new TCP connection.
class _Setup:
    """What the server answers from: its rules, provider, request log and whether it was started for
    embeddings (a llama.cpp's ``--embeddings``). ``POST /scripted/reload`` (``make_handler(reloadable=True)``)
    swaps it whole, so a test suite can give one running stand-in each test's own rules, counters reset,
    instead of starting a process per test."""

    def __init__(self, rules: Rules, provider: Provider | None, log_path: Path | None,
                 constrains: Callable[[dict], bool], llama_cpp_routes: bool, embeddings: bool = False):
        self.rules, self.provider, self.log_path, self.embeddings = rules, provider, log_path, embeddings
        self.constrains = provider.constrains if provider is not None else constrains
        self.llama_cpp = llama_cpp_routes and (provider is None or provider.tool_calling == "llama.cpp")

    def reloaded(self, spec: dict, constrains: Callable[[dict], bool], llama_cpp_routes: bool) -> _Setup:
        """A setup from a reload body ``{"rules": [...], "provider": {...} | null, "log": path | null,
        "embeddings": bool}``."""
        provider = Provider(**spec["provider"]) if spec.get("provider") else None
        log = Path(spec["log"]) if spec.get("log") else None
        return _Setup(Rules(spec.get("rules", [])), provider, log, constrains, llama_cpp_routes,
                      bool(spec.get("embeddings")))

    def embedding(self, body: dict) -> tuple[int, dict]:
        """(status, payload) of ``POST /v1/embeddings``: a llama.cpp not started for embeddings refuses it."""
        return llama_cpp_no_embeddings() if self.llama_cpp and not self.embeddings else _embeddings(body)


def _chat(handler: BaseHTTPRequestHandler, setup: _Setup, body: dict) -> None:
    """Answer a chat request: the provider's or llama.cpp's refusal, else the first rule that applies."""
    provider = setup.provider
    refusal = provider.refusal(body, handler.headers.get("Authorization")) if provider else None
    if refusal is None and setup.llama_cpp:
        refusal = llama_cpp_refusal(body)
    if refusal is not None:
        send_json(handler, *refusal)
        return
    answer = setup.rules.answer(body, provider.shape if provider else None, setup.constrains)
    if answer.delay_s:
        task = SLOTS.begin(answer.decode_tps, _usage(body, {"content": ""})["prompt_tokens"])
        time.sleep(answer.delay_s)
        SLOTS.end(task)
    if answer.drop:  # nothing is written: the client sees the connection close with no answer
        handler.close_connection = True
    elif answer.status != 200:
        send_json(handler, answer.status, {"error": {"message": answer.text, "type": "server_error"}}, answer.headers)
    else:
        send_json(handler, 200, _completion(body, answer.text, setup.rules.requests,
                                            provider.tool_calling if provider else None))


def make_handler(rules: Rules, provider: Provider | None = None, log_path: Path | None = None,
                 constrains: Callable[[dict], bool] = llama_cpp_constrains, llama_cpp_routes: bool = True,
                 reloadable: bool = False, embeddings: bool = False):
    """The request handler; ``constrains`` is the imitated server's rule for which requests are
    decoded under a constraint (a provider's own rule wins). Without a provider, or with a llama.cpp
    provider, it is llama.cpp (``/props``, ``/lora-adapters``, ``llama_cpp_refusal``) unless
    ``llama_cpp_routes`` is off (the vLLM stand-in); as llama.cpp it serves embeddings only with ``embeddings``.
    ``reloadable`` adds ``POST /scripted/reload`` (``_Setup``)."""
    live = [_Setup(rules, provider, log_path, constrains, llama_cpp_routes, embeddings)]
    log_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = KEEP_ALIVE_S
        # TCP_NODELAY, as uvicorn and cpp-httplib set: else the body waits for the client's delayed ACK (~40 ms).
        disable_nagle_algorithm = True

        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def _send(self, status: int, payload: dict | list, headers: dict | None = None) -> None:
            send_json(self, status, payload, headers)

        def _log(self, log_path: Path | None, body: dict) -> None:
            if log_path is None:
                return
            line = json.dumps({"t": time.time(), "path": self.path, "headers": dict(self.headers), "body": body})
            with log_lock, open(log_path, "a") as f:
                f.write(line + "\n")

        def do_GET(self) -> None:
            self._send(*get_route(self.path.rstrip("/"), live[0].provider, live[0].llama_cpp))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))  # read first: the connection is reused
            setup, route = live[0], self.path.rstrip("/")  # one setup for the whole request, whatever a reload does
            if reloadable and route == "/scripted/reload":
                live[0] = setup.reloaded(json.loads(raw), constrains, llama_cpp_routes)
                self._send(200, {"rules": len(live[0].rules.rules)})
                return
            if route not in ("/v1/chat/completions", "/v1/embeddings"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = json.loads(raw or b"{}")
            self._log(setup.log_path, body)
            if route == "/v1/embeddings":
                self._send(*setup.embedding(body))
                return
            _chat(self, setup, body)

    return Handler


def scripted_server(rules_path: Path, log_path: Path, port: int | None = None,
                    request_log: Path | None = None) -> ServerProcess:
    """The scripted server as a managed child process (call ``.start()`` or use ``with``)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "automem_dagster.standins.scripted_server", "--port", str(port), "--rules", str(rules_path)]
    if request_log is not None:
        cmd += ["--log", str(request_log)]
    return ServerProcess(cmd, port, Path(log_path), "scripted server")


class ThreadingServer(ThreadingHTTPServer):
    """A thread per connection (kept alive: ``make_handler``), with uvicorn's listen backlog (2048, which vLLM's and most
    OpenAI-compatible servers run behind) instead of socketserver's 5: with 16 or more episodes
    calling at once, a backlog of 5 drops connections that the client then retries after a
    second, so the stand-in would be the bottleneck of a scaling run, not the harness."""

    request_queue_size = 2048


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rules", type=Path, required=True)
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (a host's private address in deploy/two-hosts.sh)")
    args = parser.parse_args()
    spec = json.loads(args.rules.read_text())
    if isinstance(spec, list):
        spec = {"rules": spec}
    provider = Provider(**spec["provider"]) if "provider" in spec else None
    server = ThreadingServer((args.host, args.port),
                             make_handler(Rules(spec.get("rules", [])), provider, args.log, reloadable=True,
                                          embeddings=bool(spec.get("embeddings"))))
    print(f"scripted server listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
