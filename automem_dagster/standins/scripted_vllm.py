"""A scripted stand-in for a vLLM server with ``--enable-lora``: runtime LoRA loading, model
listing, ``/tokenize`` and context-length refusals, no model and no GPU.

No vLLM runs on these machines, so the code that talks to one is tested against this. It
answers with vLLM's routes, status codes, error shapes and messages (read from vLLM's
``entrypoints/openai`` serving code; ``docs/vllm.md`` lists them): the LoRA routes exist only
with runtime updating on (else FastAPI's 404 ``{"detail": "Not Found"}``); a load checks the
folder exists (``--visible-root`` hides the rest, as a container sees only its volumes) and
reads the rank from its ``adapter_config.json`` against ``--max-lora-rank`` (a rank above it is
HTTP 400 ``BadRequestError``: ``OpenAIServingModels.load_lora_adapter``, vllm/entrypoints/openai/
serving_models.py, answers every engine failure of ``add_lora`` with 400 ``BadRequestError`` except
"No adapter found", which is 404 ``NotFoundError``);
a chat request must name the base model or a loaded adapter, and its prompt plus ``max_tokens``
must fit ``--max-model-len``. Chat replies come from the same rules file as
``scripted_server``. Its tokenizer is a stand-in too: a word or a single symbol is one token,
so dense text (ASCII maps) costs more than chars/4, as under real BPE tokenizers.

Like vLLM it ignores request fields it does not know (vllm/entrypoints/openai/engine/protocol.py
``OpenAIBaseModel``: ``extra="allow"``, ignored names logged at warning level, commit 040a2cc2), so a top-level
``grammar`` (llama.cpp's field) or a ``lora`` list changes nothing, and a rule's ``free`` text
answers a request that carries no constraint vLLM reads: ``structured_outputs`` (from vLLM
0.10.2, PR #22772), ``guided_*`` (before 0.12.0, which removed them) or a ``response_format``
JSON schema. ``GET /version`` answers ``{"version": ...}`` (``--version``) as vLLM's server does.
Like vLLM it loads an adapter trained on another base model without complaint: the adapter is
checked for a folder, a config and its rank, nothing more, so only the project's own base check
(``llm/vllm_lora.py``) can catch a wrong base.

``GET /scripted/requests`` returns, for each chat request, the model it named and its prompt
tokens, so a test can prove which adapter served which memory turn.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import threading
from pathlib import Path

from automem_dagster.llm.process import ServerProcess, free_port
from automem_dagster.standins.scripted_rules import Rules
from automem_dagster.standins.scripted_server import ThreadingServer, make_handler

_TOKEN = re.compile(r"\w+|[^\w\s]")
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds per message (role markers), as in ChatML."""


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def count_messages(messages: list[dict]) -> int:
    return sum(MESSAGE_OVERHEAD + count_tokens(str(m.get("content", ""))) for m in messages) + 2


class _State:
    """The server's loaded adapters and the chat requests seen, shared by the handler threads."""

    def __init__(self, base_model: str, max_lora_rank: int, runtime_lora: bool, max_model_len: int,
                 visible_root: Path | None = None, version: str = "0.11.0", base_root: str | None = None):
        self.base_model = base_model
        self.version = version
        self.base_root = base_root or base_model
        self.visible_root = visible_root
        self.max_lora_rank = max_lora_rank
        self.runtime_lora = runtime_lora
        self.max_model_len = max_model_len
        self.adapters: dict[str, str] = {}
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    def models(self) -> dict:
        base = {"id": self.base_model, "object": "model", "owned_by": "vllm", "root": self.base_root, "parent": None,
                "max_model_len": self.max_model_len}
        cards = [{"id": name, "object": "model", "owned_by": "vllm", "root": path, "parent": self.base_model}
                 for name, path in self.adapters.items()]
        return {"object": "list", "data": [base, *cards]}

    def load(self, body: dict) -> tuple[int, str | dict]:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return _error(400, "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", None)
        if name in self.adapters:
            return _error(400, f"The lora adapter '{name}' has already been loaded. If you want to load the adapter "
                          "in place, set 'load_inplace' to True.", "InvalidUserInput", None)
        config = Path(path) / "adapter_config.json"
        hidden = self.visible_root is not None and not Path(path).resolve().is_relative_to(self.visible_root.resolve())
        if hidden or not config.is_file():
            return _error(404, f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError", None)
        rank = int(json.loads(config.read_text())["r"])
        if rank > self.max_lora_rank:
            return _error(400, f"LoRA rank {rank} is greater than max_lora_rank {self.max_lora_rank}.",
                          "BadRequestError", None)
        self.adapters[name] = path
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, body: dict) -> tuple[int, str | dict]:
        name = body.get("lora_name")
        if name not in self.adapters:
            return _error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError", None)
        del self.adapters[name]
        return 200, f"Success: LoRA adapter '{name}' removed successfully."

    def chat(self, body: dict) -> tuple[int, dict] | None:
        """A refusal for a chat request, or None to let the rules answer it; every request is recorded."""
        model = body.get("model")
        prompt = count_messages(body.get("messages", []))
        out = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        self.requests.append({"model": model, "prompt_tokens": prompt})
        if model != self.base_model and model not in self.adapters:
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        if prompt + out > self.max_model_len:
            return _error(400, f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                          f"requested {prompt + out} tokens ({prompt} in the messages, {out} in the completion). "
                          "Please reduce the length of the messages or completion.", "BadRequestError", None)
        return None

    def tokenize(self, body: dict) -> tuple[int, dict]:
        if "messages" in body:
            count = count_messages(body["messages"])
        elif "prompt" in body:
            count = count_tokens(str(body["prompt"]))
        else:
            return _error(400, "Either 'prompt' or 'messages' must be provided.", "BadRequestError", None)
        return 200, {"count": count, "max_model_len": self.max_model_len, "tokens": list(range(count))}


def _error(status: int, message: str, kind: str, param: str | None) -> tuple[int, dict]:
    return status, {"error": {"message": message, "type": kind, "param": param, "code": status}}


def vllm_constrains(body: dict, version: str) -> bool:
    """Whether vLLM ``version`` decodes ``body`` under a constraint (see the module doc)."""
    release = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    fmt = body.get("response_format") or {}
    structured = isinstance(body.get("structured_outputs"), dict) and release >= (0, 10, 2)
    guided = any(k.startswith("guided_") for k in body) and release < (0, 12, 0)
    return structured or guided or fmt.get("type") in ("json_schema", "json_object")


def make_vllm_handler(rules: Rules, state: _State):
    base = make_handler(rules, constrains=lambda body: vllm_constrains(body, state.version), llama_cpp_routes=False)

    class Handler(base):
        def _answer(self, status: int, payload: str | dict) -> None:
            if isinstance(payload, dict):
                self._send(status, payload)
                return
            data = payload.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            route = self.path.rstrip("/")
            with state.lock:
                if route == "/v1/models":
                    self._send(200, state.models())
                elif route == "/version":
                    self._send(200, {"version": state.version})
                elif route == "/scripted/requests":
                    self._send(200, {"requests": list(state.requests)})
                else:
                    super().do_GET()

        def do_POST(self) -> None:
            route = self.path.rstrip("/")
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.loads(raw or b"{}")
            lora_routes = {"/v1/load_lora_adapter": state.load, "/v1/unload_lora_adapter": state.unload}
            with state.lock:
                if route in lora_routes:
                    if not state.runtime_lora:
                        self._send(404, {"detail": "Not Found"})
                    else:
                        self._answer(*lora_routes[route](body))
                    return
                if route == "/tokenize":
                    self._send(*state.tokenize(body))
                    return
                refusal = state.chat(body) if route == "/v1/chat/completions" else None
            if refusal is not None:
                self._send(*refusal)
                return
            connection, self.rfile = self.rfile, io.BytesIO(raw)  # the scripted server's handler reads the body again
            try:
                super().do_POST()
            finally:
                self.rfile = connection  # the kept-alive connection's next request is read from the socket

    return Handler


def scripted_vllm(rules_path: Path, log_path: Path, *, base_model: str = "base", max_lora_rank: int = 16,
                  runtime_lora: bool = True, max_model_len: int = 8192, visible_root: Path | None = None,
                  port: int | None = None, version: str = "0.11.0", base_root: str | None = None) -> ServerProcess:
    """The stand-in as a managed child process (call ``.start()`` or use ``with``)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "automem_dagster.standins.scripted_vllm", "--port", str(port), "--rules", str(rules_path),
           "--base-model", base_model, "--max-lora-rank", str(max_lora_rank), "--max-model-len", str(max_model_len),
           "--version", version, "--base-root", base_root or base_model]
    if not runtime_lora:
        cmd.append("--no-runtime-lora")
    if visible_root is not None:
        cmd += ["--visible-root", str(visible_root)]
    return ServerProcess(cmd, port, Path(log_path), "scripted vLLM server")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rules", type=Path, required=True)
    parser.add_argument("--base-model", default="base", help="the served model name (vLLM's --served-model-name)")
    parser.add_argument("--max-lora-rank", type=int, default=16, help="vLLM's default is 16")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--version", default="0.11.0", help="what GET /version reports, and which fields it reads")
    parser.add_argument("--base-root", default=None, help="the base model's path or hub name (its card's `root`)")
    parser.add_argument("--no-runtime-lora", action="store_true",
                        help="as without VLLM_ALLOW_RUNTIME_LORA_UPDATING=True: no load/unload routes")
    parser.add_argument("--visible-root", type=Path, default=None,
                        help="only adapter paths under this folder exist for the server (a container's volume)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (deploy/two-hosts.sh's main host)")
    args = parser.parse_args()
    state = _State(args.base_model, args.max_lora_rank, not args.no_runtime_lora, args.max_model_len, args.visible_root,
                   args.version, args.base_root)
    server = ThreadingServer((args.host, args.port), make_vllm_handler(Rules(json.loads(args.rules.read_text())),
                                                                                state))
    print(f"scripted vLLM server listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
