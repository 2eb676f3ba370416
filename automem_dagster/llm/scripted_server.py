"""A scripted OpenAI-compatible server: fixed replies chosen by rules, no model.

It isolates everything around the model: tests use it to drive the agent and the outer
loops through exact replies (including malformed ones and server errors), and benchmarks
use it as an instant endpoint to measure the harness's own overhead. It speaks the same
``/v1/chat/completions`` protocol as the real servers and runs as its own process on
127.0.0.1, started and stopped by PID like the embedded server.

Rules file (JSON): ``[{"match": "substring", "reply": "text"} | {"match": "...", "status": 500}]``
(a failing rule may carry ``"error": "message"``, e.g. a server's context-overflow wording).
The first rule whose ``match`` occurs in the request's messages (all of them, joined) wins;
a rule may carry ``"replies": [...]`` to cycle through several texts, and ``"delay_s"`` to
answer after a pause (a stand-in for model latency in tests and benchmarks).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from automem_dagster.llm.process import ServerProcess, free_port


class _Rules:
    def __init__(self, rules: list[dict]):
        self.rules = rules
        self.counters = [0] * len(rules)
        self.lock = threading.Lock()
        self.requests = 0

    def answer(self, body: dict) -> tuple[int, str, float]:
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        with self.lock:
            self.requests += 1
            for i, rule in enumerate(self.rules):
                if rule.get("match", "") in text:
                    delay = float(rule.get("delay_s", 0.0))
                    if "status" in rule:
                        return int(rule["status"]), rule.get("error", f"scripted failure {rule['status']}"), delay
                    replies = rule.get("replies") or [rule.get("reply", "")]
                    reply = replies[self.counters[i] % len(replies)]
                    self.counters[i] += 1
                    return 200, reply, delay
        return 200, "", 0.0


def make_handler(rules: _Rules):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send(200, {"status": "ok"})
            elif self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            status, reply, delay = rules.answer(body)
            time.sleep(delay)
            if status != 200:
                self._send(status, {"error": {"message": reply, "type": "server_error"}})
                return
            prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
            self._send(200, {
                "id": "scripted", "object": "chat.completion", "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": reply}}],
                "usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": len(reply) // 4,
                          "total_tokens": prompt_chars // 4 + len(reply) // 4},
            })

    return Handler


def scripted_server(rules_path: Path, log_path: Path, port: int | None = None) -> ServerProcess:
    """The scripted server as a managed child process (call ``.start()`` or use ``with``)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "automem_dagster.llm.scripted_server", "--port", str(port), "--rules", str(rules_path)]
    return ServerProcess(cmd, port, Path(log_path), "scripted server")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rules", type=Path, required=True)
    args = parser.parse_args()
    rules = _Rules(json.loads(args.rules.read_text()))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(rules))
    print(f"scripted server listening on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
