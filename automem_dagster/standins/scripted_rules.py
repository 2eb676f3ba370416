"""The scripted stand-in's rules: which fixed reply answers a request (``scripted_server.py`` documents the file).

A rule that cycles through several ``replies`` picks one per request's sampling ``seed``: the first
request the rule answers under a seed fixes that seed's reply (the next in the cycle), and every later
request under the same seed gets the same one, as a real server sampling from a seed answers a repeated
request the same way. Two arms of a paired replay (a decision replayed as made and ablated, the champion
against itself) send the same seeds, so they meet the same replies however their requests interleave;
a counter shared by every request gave the second arm the replies after the first arm's. A request
without a seed takes the next reply in turn, as an unseeded sampler gives a new draw each call. The
fault counters (``times``, ``every``) stay shared: they stand for the server's state, not the model's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field


def llama_cpp_constrains(body: dict) -> bool:
    """Whether llama.cpp's server decodes ``body`` under a constraint: a ``grammar``, a ``json_schema``
    or a ``response_format`` of type ``json_schema`` or ``json_object`` (tools/server README)."""
    fmt = body.get("response_format") or {}
    return bool(body.get("grammar") or body.get("json_schema")) or fmt.get("type") in ("json_schema", "json_object")


@dataclass(frozen=True)
class Answer:
    status: int = 200
    text: str | dict = ""
    """The reply (text, or tool calls), or the error message of a failing status."""
    delay_s: float = 0.0
    headers: dict = field(default_factory=dict)
    drop: bool = False
    decode_tps: float = 0.0
    """Tokens a second its ``GET /slots`` shows decoded during ``delay_s`` (0: a hung request)."""


class Rules:
    def __init__(self, rules: list[dict]):
        self.rules = rules
        self.counters = [0] * len(rules)
        """Per rule, the replies drawn so far: the next new draw takes the next reply of the cycle."""
        self.answered = [0] * len(rules)
        self.matched = [0] * len(rules)
        self.by_seed: list[dict[int, int]] = [{} for _ in rules]
        """Per rule, the reply index each seed was given the first time the rule answered it."""
        self.lock = threading.Lock()
        self.requests = 0

    def _reply_index(self, i: int, seed: object) -> tuple[int, bool]:
        """(index into rule ``i``'s replies, whether it is a new draw that moves the cycle on)."""
        if isinstance(seed, int) and seed in self.by_seed[i]:
            return self.by_seed[i][seed], False
        return self.counters[i], True

    def answer(self, body: dict, shape: Callable[[dict, str | dict], str | dict | None] | None = None,
               constrains: Callable[[dict], bool] = llama_cpp_constrains) -> Answer:
        """What the first rule that applies to this request says. ``shape`` (a provider's) turns a reply
        into what its server lets the model give under the request's ``tool_choice``; a rule whose
        reply it cannot give (None) is passed over. A rule's ``free`` text answers a request that
        ``constrains`` (the imitated server's rule) says is not constrained."""
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        seed = body.get("seed")
        with self.lock:
            self.requests += 1
            for i, rule in enumerate(self.rules):
                if rule.get("match", "") not in text or len(text) <= rule.get("over_chars", -1):
                    continue
                self.matched[i] += 1
                if self.matched[i] % rule.get("every", 1) or self.answered[i] >= rule.get("times", float("inf")):
                    continue
                replies = rule.get("replies") or [rule.get("reply", "")]
                index, new = self._reply_index(i, seed)
                reply = replies[index % len(replies)]
                if "free" in rule and not constrains(body):
                    reply = rule["free"]
                status = int(rule.get("status", 200))
                if status == 200 and shape is not None:
                    reply = shape(body, reply)
                    if reply is None:
                        continue
                self.answered[i] += 1
                if new:
                    self.counters[i] += 1
                    if isinstance(seed, int):
                        self.by_seed[i][seed] = index
                return Answer(status, reply if status == 200 else rule.get("error", f"scripted failure {status}"),
                              float(rule.get("delay_s", 0.0)), dict(rule.get("headers", {})), bool(rule.get("drop")),
                              float(rule.get("decode_tps", 0.0)))
        return Answer()
