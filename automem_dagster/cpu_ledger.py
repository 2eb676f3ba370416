"""Where a rollout's CPU goes, by phase of a step, in one ledger both harness benchmarks read.

With tens of episodes on one event loop, a step's wall time holds other episodes' work, so the
harness's cost is only visible as CPU. The runner, the agent's helpers, the memory store and
the client charge their synchronous work to a phase of the process-wide ``LEDGER`` with
``time.thread_time`` (the CPU of the thread doing it, so a game step on its lane's thread and
the event loop's work never count twice). Phases nest: time inside a nested phase (the memory
index read while a prompt is built) is charged to the inner one only. What no phase holds, the
process's CPU less the phases, is the openai client's request path, httpx and asyncio
(``REST``): it cannot be charged around an ``await`` without charging the other episodes'
work done meanwhile. Both harness benchmarks, ``benchmarks/rollout_scaling.py`` and
``benchmarks/harness_overhead.py``, take the same measure: ``spent()`` around the rollout, reported
as ``cpu_ms_per_step`` (``per_step_ms``), so their figures compare directly; harness_overhead also
sets it beside its wall-based harness and names the difference (``ledger_vs_wall``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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


class _Book:
    """One thread's seconds by phase and its stack of open phases (name, CPU time it last resumed)."""

    __slots__ = ("seconds", "stack")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.stack: list[list] = []


class _Phase:
    """``with LEDGER.phase(name):``, a plain context manager: a step enters 20-40 phases (the store's
    reads each charge "memory"), and a generator-based one with a lock per charge cost about 7 us an
    entry, 0.2-0.3 ms a step, on this project's 2-core machine."""

    __slots__ = ("_book", "_name")

    def __init__(self, book: _Book, name: str) -> None:
        self._book, self._name = book, name

    def __enter__(self) -> None:
        now, stack = time.thread_time(), self._book.stack
        if stack:
            self._book.seconds[stack[-1][0]] += now - stack[-1][1]
        stack.append([self._name, now])

    def __exit__(self, *_exc) -> None:
        now, stack = time.thread_time(), self._book.stack
        name, resumed = stack.pop()
        self._book.seconds[name] += now - resumed
        if stack:
            stack[-1][1] = now


class CpuLedger:
    """CPU seconds by phase, summed over every thread of the process. Each thread keeps its own book,
    which only it writes, so a charge takes no lock; a snapshot sums the books. A finished thread's
    book is final: a snapshot folds it into ``_retired``, so a process that starts a game thread per
    lane for batch after batch keeps one book per live thread."""

    def __init__(self) -> None:
        self._books: list[tuple[threading.Thread, _Book]] = []
        self._retired = dict.fromkeys(PHASES, 0.0)
        self._lock = threading.Lock()
        self._local = threading.local()

    def _book(self) -> _Book:
        book = getattr(self._local, "book", None)
        if book is None:
            book = self._local.book = _Book()
            with self._lock:
                self._books.append((threading.current_thread(), book))
        return book

    def phase(self, name: str) -> _Phase:
        """Charge this thread's CPU inside the block to ``name`` (an enclosing phase pauses meanwhile)."""
        return _Phase(self._book(), name)

    def charged(self, name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: every call of the function is charged to ``name``."""
        def wrap(fn: Callable[P, R]) -> Callable[P, R]:
            @wraps(fn)
            def inner(*args: P.args, **kwargs: P.kwargs) -> R:
                with self.phase(name):
                    return fn(*args, **kwargs)
            return inner
        return wrap

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            live = []
            for thread, book in self._books:
                if thread.is_alive():
                    live.append((thread, book))
                else:
                    for name in PHASES:
                        self._retired[name] += book.seconds[name]
            self._books = live
            return {name: self._retired[name] + sum(book.seconds[name] for _, book in live) for name in PHASES}


LEDGER = CpuLedger()


def per_step_ms(phases: dict[str, float], process_cpu_s: float, steps: int) -> dict[str, float]:
    """CPU seconds spent by phase (``phases``) and by the whole process (``process_cpu_s``, every thread)
    as ms per step: each phase, ``REST`` (the process's CPU less the phases), ``harness`` (all but the
    game's steps) and ``process``. So the phases and ``REST`` sum to ``process``, and ``harness`` is
    ``process`` less ``game``."""
    if steps <= 0:
        return {}
    out = {name: phases[name] * 1e3 / steps for name in PHASES}
    out[REST] = (process_cpu_s - sum(phases[name] for name in PHASES)) * 1e3 / steps
    out["harness"] = (process_cpu_s - phases["game"]) * 1e3 / steps
    out["process"] = process_cpu_s * 1e3 / steps
    return out


@dataclass
class Spent:
    """What the process spent over a window: its CPU seconds (every thread, ``time.process_time``),
    the ledger's seconds by phase and the window's wall seconds. Picklable, so a shard process can
    send its own back."""

    process_s: float = 0.0
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    wall_s: float = 0.0

    def __add__(self, other: Spent) -> Spent:
        """Two windows summed (the ledgers of several processes; their wall seconds summed too)."""
        return Spent(self.process_s + other.process_s, {k: self.phases[k] + other.phases[k] for k in PHASES},
                     self.wall_s + other.wall_s)

    def per_step_ms(self, steps: int) -> dict[str, float]:
        """The window as ms per step over ``steps`` (module function ``per_step_ms``)."""
        return per_step_ms(self.phases, self.process_s, steps)


@contextmanager
def spent() -> Iterator[Spent]:
    """``with spent() as window:`` -- on leaving the block, ``window`` holds the process's CPU and the
    ledger's phases spent inside it: the one measure both harness benchmarks report per step."""
    window = Spent()
    wall, cpu, before = time.perf_counter(), time.process_time(), LEDGER.snapshot()
    try:
        yield window
    finally:
        after = LEDGER.snapshot()
        window.process_s = time.process_time() - cpu
        window.phases = {name: after[name] - before[name] for name in PHASES}
        window.wall_s = time.perf_counter() - wall
