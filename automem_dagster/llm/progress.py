"""Wait for a slow llama.cpp server while it shows progress; time out only when it does not.

A call's ``timeout_s`` used to bound each HTTP attempt outright, so on a loaded machine the embedded
server, alive and decoding, was cut off after 60 s, asked again (a retry that may sample a different
reply: a timeout changed the result) and, after four tries, the episode was abandoned. llama.cpp's
server says what it is doing at ``GET /slots`` (on by default; ``--no-slots`` turns it off): per slot
``is_processing``, ``id_task``, ``n_prompt_tokens_processed`` and ``next_token[0].n_decoded``
(tools/server/README.md, "GET /slots"; ``server_slot::to_json`` in tools/server/server-context.cpp of
ggml-org/llama.cpp; the installed xllamacpp 2026.10.11549, which the embedded server runs, answers
these fields: checked 2026-12-06). An attempt watched here has no read timeout of its own: while
it waits, the server's slots are read every ``poll_s`` and the attempt goes on as long as any of
those numbers moved within the last ``timeout_s`` (the request's own slot or one ahead of it in the
queue: a queued request waits for the work before it). An attempt during which nothing moved for
``timeout_s`` ends as a read timeout, which the openai client retries as before. A server without
``/slots`` (another server, ``--no-slots``) keeps the plain timeout.

What it cannot see: llama.cpp processes a prompt in batches of up to ``n_ubatch`` (512) tokens and
updates no counter within one, so a ``timeout_s`` shorter than one such batch still cuts off a loaded
server (511 prompt tokens took 6.4 s on the 2-core machine with other work running, measured
2026-12-06); the default 60 s covers it many times over.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx2

Snapshot = tuple
"""What moves on a working server: per slot (id, is_processing, id_task, prompt tokens processed, tokens decoded)."""


def slots_snapshot(slots: object) -> Snapshot | None:
    """The progress counters of a ``GET /slots`` answer, or None when it is not llama.cpp's list of slots."""
    if not isinstance(slots, list) or not all(isinstance(s, dict) and "is_processing" in s for s in slots):
        return None
    out = []
    for slot in slots:
        nxt = slot.get("next_token")
        nxt = (nxt[0] if nxt else {}) if isinstance(nxt, list) else (nxt or {})  # a list of one since 2025
        out.append((slot.get("id"), bool(slot["is_processing"]), slot.get("id_task"),
                    slot.get("n_prompt_tokens_processed"), nxt.get("n_decoded")))
    return tuple(out)


class ServerProgress:
    """The progress of one llama.cpp server at ``root_url`` (its base URL without ``/v1``)."""

    def __init__(self, root_url: str, timeout_s: float, poll_s: float | None = None):
        self.root_url = root_url.rstrip("/")
        self.timeout_s = timeout_s
        self.poll_s = poll_s if poll_s is not None else min(2.0, timeout_s / 4)
        self.available: bool | None = None
        """Whether the server answers ``/slots`` with its slots: None until first asked."""

    async def snapshot(self, session: aiohttp.ClientSession) -> Snapshot | None:
        """The slots' counters now, or None when the server does not say (no ``/slots``, or no answer in time)."""
        try:
            async with session.get(f"{self.root_url}/slots", timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as resp:
                if resp.status != 200:
                    return None
                return slots_snapshot(await resp.json(content_type=None))
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return None

    async def watches(self) -> bool:
        """Whether attempts on this server are watched: asked of the server once, at the first attempt."""
        if self.available is None:
            async with aiohttp.ClientSession() as session:
                self.available = await self.snapshot(session) is not None
        return self.available

    async def guard(self, attempt: Callable[[], Awaitable[httpx2.Response]]) -> httpx2.Response:
        """Run ``attempt`` (an HTTP send without a read timeout) until it answers, or until the server has
        shown no progress for ``timeout_s``: then it is cancelled and a read timeout is raised."""
        task = asyncio.ensure_future(attempt())
        try:
            async with aiohttp.ClientSession() as session:
                last, moved = None, time.monotonic()
                while True:
                    done, _ = await asyncio.wait({task}, timeout=self.poll_s)
                    if done:
                        return task.result()
                    now = await self.snapshot(session)
                    if now is not None and last is not None and now != last:
                        moved = time.monotonic()
                    last = now if now is not None else last
                    if time.monotonic() - moved >= self.timeout_s:
                        raise httpx2.ReadTimeout(f"the server at {self.root_url} showed no progress on its slots "
                                                 f"for {self.timeout_s:.0f}s")
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


def watched_timeout(timeout: dict) -> dict:
    """An httpx request's ``timeout`` extension with no read timeout: the guard bounds the wait instead."""
    return {**timeout, "read": None}
