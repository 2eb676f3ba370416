"""A sampling stand-in: an OpenAI-compatible server whose replies are drawn from the request's seed.

It stands for llama.cpp's server at a temperature above 0, in the two ways a counterfactual replay
meets it (tools/server/README.md of ggml-org/llama.cpp, ``POST /completion`` options):

- ``seed``: "Set the random number generator (RNG) seed": the same prompt with the same seed gives
  the same reply, so two arms that share seeds (``agent.sampling.request_seed``) meet the same draws,
  and a prompt changed by an ablated write gives another draw;
- ``cache_prompt`` (default ``true``): "the logits are **not** guaranteed to be bit-for-bit
  identical for different batch sizes (prompt processing vs. token generation) enabling this
  option can cause nondeterministic results": a prompt served again from the cache may be
  sampled differently, so two arms as made, same seeds, can still drift apart.

A rule ``{"match": "text" or ["all", "of", "these"], "choices": [["reply", weight], ...]}`` (or a fixed
``"reply"``) applies when every match string occurs in the request's messages; the first that
applies answers. Its draw is seeded by the request's ``seed``, its messages and how many times this
server served that same request before (0: what a cold cache gives; a repeat takes the cached path,
another draw). Unlike ``scripted_server`` nothing here counts requests per rule or cycles replies: the
reply is a function of the request and the server's cache, as a sampling server's is.

Run as ``python -m automem_dagster.standins.seeded_server --port P --rules rules.json``; ``seeded_server``
gives it as a managed child process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import threading
from collections import Counter
from pathlib import Path

from automem_dagster.llm.process import ServerProcess, free_port
from automem_dagster.standins.scripted_rules import Answer
from automem_dagster.standins.scripted_server import ThreadingServer, make_handler


class SeededRules:
    """The rules and the served-request counts (the prompt cache) of one server."""

    def __init__(self, rules: list[dict]):
        self.rules = rules
        self.served: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.requests = 0

    def answer(self, body: dict, shape=None, constrains=None) -> Answer:
        """The reply the first applicable rule draws for ``body`` (``shape`` and ``constrains``, a provider's
        and a constraint rule of ``scripted_server``, do not apply to a sampling stand-in)."""
        messages = json.dumps(body.get("messages", []), sort_keys=True)
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        key = hashlib.sha256(f"{body.get('seed')}|{messages}".encode()).hexdigest()
        with self.lock:
            self.requests += 1
            repeat = self.served[key]
            self.served[key] += 1
        for rule in self.rules:
            wanted = rule.get("match", "")
            if all(w in text for w in ([wanted] if isinstance(wanted, str) else wanted)):
                choices = rule.get("choices") or [[rule.get("reply", ""), 1.0]]
                draw = random.Random(f"{key}|{repeat}")
                return Answer(200, draw.choices([c[0] for c in choices], weights=[c[1] for c in choices])[0])
        return Answer()


def seeded_server(rules_path: Path, log_path: Path, port: int | None = None) -> ServerProcess:
    """The seeded stand-in as a managed child process (call ``.start()`` or use ``with``)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "automem_dagster.standins.seeded_server", "--port", str(port), "--rules", str(rules_path)]
    return ServerProcess(cmd, port, Path(log_path), "seeded server")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rules", type=Path, required=True)
    args = parser.parse_args()
    server = ThreadingServer(("127.0.0.1", args.port), make_handler(SeededRules(json.loads(args.rules.read_text()))))
    print(f"seeded server listening on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
