"""Where a rollout's CPU goes, by phase of a step, in one ledger both harness benchmarks read.

With tens of episodes on one event loop, a step's wall time holds other episodes' work, so the
harness's cost is only visible as CPU. The runner, the agent's helpers, the memory store and
the client charge their synchronous work to a phase of the process-wide ``LEDGER`` with
``time.thread_time`` (the CPU of the thread doing it, so a game step on its lane's thread and
the event loop's work never count twice). Phases nest: time inside a nested phase (the memory
index read while a prompt is built) is charged to the inner one only. What no phase holds, the
process's CPU less the phases, is the openai client's request path, httpx and asyncio
(``REST``): it cannot be charged around an ``await`` without charging the other episodes'
work done meanwhile. ``benchmarks/rollout_scaling.py`` reports ``per_step_ms`` of it;
``benchmarks/harness_overhead.py`` does not yet (issue 29).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec, TypeVar

PHASES = {
    "request": "request building: prompts, turn constraints, the request body",
    "parse": "reply parsing: the completion's fields, memory operations and the action read from its text",
    "memory": "memory operations and reads: the store's files, index, reads, writes and journal",
    "trajectory": "trajectory writing: the step line's JSON and its write",
    "digest": "the memory digest recorded per step",
    "game": "the game's step (on its lane's thread)",
    "setup": "episode setup and teardown: the game's build, reset and close, the agent and its store",
}
REST = "client_and_event_loop"
"""The process's CPU that no phase holds: the openai client's request path, httpx, asyncio."""

P = ParamSpec("P")
R = TypeVar("R")


class CpuLedger:
    """CPU seconds by phase, summed over every thread of the process."""

    def __init__(self) -> None:
        self._seconds = dict.fromkeys(PHASES, 0.0)
        self._lock = threading.Lock()
        self._local = threading.local()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge this thread's CPU inside the block to ``name`` (an enclosing phase pauses meanwhile)."""
        stack = self._local.__dict__.setdefault("stack", [])
        now = time.thread_time()
        if stack:
            self._charge(stack[-1][0], now - stack[-1][1])
        stack.append([name, now])
        try:
            yield
        finally:
            now = time.thread_time()
            self._charge(name, now - stack.pop()[1])
            if stack:
                stack[-1][1] = now

    def charged(self, name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: every call of the function is charged to ``name``."""
        def wrap(fn: Callable[P, R]) -> Callable[P, R]:
            @wraps(fn)
            def inner(*args: P.args, **kwargs: P.kwargs) -> R:
                with self.phase(name):
                    return fn(*args, **kwargs)
            return inner
        return wrap

    def _charge(self, name: str, seconds: float) -> None:
        with self._lock:
            self._seconds[name] += seconds

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self._seconds)


LEDGER = CpuLedger()


def per_step_ms(before: dict[str, float], after: dict[str, float], process_cpu_s: float, steps: int) -> dict[str, float]:
    """The ledger between two snapshots as CPU ms per step: each phase, ``REST`` (the process's CPU
    ``process_cpu_s`` less the phases), ``harness`` (all but the game's steps) and ``process``."""
    if steps <= 0:
        return {}
    phases = {name: after[name] - before[name] for name in PHASES}
    rest = process_cpu_s - sum(phases.values())
    out = {name: seconds * 1e3 / steps for name, seconds in phases.items()}
    out[REST] = rest * 1e3 / steps
    out["harness"] = (process_cpu_s - phases["game"]) * 1e3 / steps
    out["process"] = process_cpu_s * 1e3 / steps
    return out


def add(*snapshots: dict[str, float]) -> dict[str, float]:
    """Snapshots summed (the ledgers of several processes)."""
    return {name: sum(s.get(name, 0.0) for s in snapshots) for name in PHASES}
