"""The embedded server takes one request at a time, and a slot's prompt cache serves only its own episode.

Replays of a batch repeated bit for bit one episode at a time but not at concurrency 2 (issue 54).
Measured on the embedded model (xllamacpp 2026.10.11549, SmolLM2-135M Q4_1, seeded sampling): the
same request's logits depend on how the server computed its prompt. A second request whose prefix
sat in the slot's cache and the same request read from scratch gave log-probabilities of the first
token -1.3153 and -1.3148; read after a different earlier request on the same slot, -1.2590. llama.cpp
says as much (tools/server/README.md, ``cache_prompt``: "logits are not guaranteed to be bit-for-bit
identical for different batch sizes (prompt processing vs. token generation)"). Two things made a
request's computation depend on what else ran: slots decoded together in one batch, and a slot's
cache (or the server's RAM prompt cache, ``--cache-ram``) holding whatever request last used it.

So, for the embedded server: one request at a time (``SlotTurns.turn``, shared by every client of the
server in a session), the RAM prompt cache off (``embedded_server``), and a request reuses its slot's
cache only when that slot last served the same episode (``episode``, set per episode by the rollout
runner); otherwise it is read from scratch. Each lane has its own slot (``LLMClient``: slot ``lane %
slots``), and the runner plays at most as many episodes at once as the server has slots
(``lanes_for``), so an episode's requests find the same cache whatever runs beside it. What this costs
is measured in ``benchmarks/replay_concurrency.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

episode: ContextVar[str | None] = ContextVar("automem_episode", default=None)
"""The episode whose calls run in this task (the rollout runner sets it): replicas keep it on one
replica, and the embedded server's slot cache serves only it."""

HOW = ("one request at a time; a slot's prompt cache reused only within its episode; no RAM prompt cache")
"""What the batch identity records of the embedded server's requests (``llm/server_info.py``)."""


class SlotTurns:
    """The turns of one embedded server's ``slots``: a lock taken per request, and which episode each slot served last."""

    def __init__(self, slots: int):
        self.slots = slots
        self.last: dict[int, str | None] = {}
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _lock_here(self) -> asyncio.Lock:
        """The lock of the running event loop (a session used again under another loop gets a fresh one)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._lock, self._loop = asyncio.Lock(), loop
        return self._lock

    @asynccontextmanager
    async def turn(self, slot: int | None) -> AsyncIterator[bool]:
        """Hold the server for one request on ``slot``; yields whether the slot's cache may be reused."""
        async with self._lock_here():
            mine = episode.get()
            reuse = slot is not None and mine is not None and self.last.get(slot) == mine
            try:
                yield reuse
            finally:
                if slot is not None:
                    self.last[slot] = mine


def lanes_for(concurrency: int, clients: Any) -> tuple[int, str | None]:
    """How many episodes to play at once with ``clients``, and why fewer than ``concurrency`` (else None): on
    an embedded server that takes turns, lanes beyond its slots would share a slot's cache between episodes
    and part their replays, and gain nothing, since it answers one request at a time anyway."""
    slots = [c.turns.slots for c in (getattr(clients, "game", None), getattr(clients, "memory", None))
             if getattr(c, "turns", None) is not None]
    if not slots or concurrency <= min(slots):
        return concurrency, None
    return min(slots), (f"the embedded server has {min(slots)} slots and answers one request at a time: playing "
                        f"{min(slots)} episodes at once, not {concurrency} (set embedded_parallel in the endpoints "
                        "file for more slots)")
