"""One endpoint role served by several identical servers (vLLM replicas behind no router).

Requests go to the replica with the fewest requests in flight, but an episode stays on the
replica it started on while that replica is healthy: the server keeps the episode's prompt
prefix in its cache (vLLM's automatic prefix caching, llama.cpp's slot cache), and moving the
episode would make it process the whole prompt again. A replica that cannot be reached, or
answers with a server error, after the openai client's own retries is taken out for
``cooldown_s`` and the request goes to another replica, so the episode continues there and
nothing is lost; after the cooldown the replica gets requests again. Errors that every replica
would give as well (a refused parameter, a context overflow) are raised at once.

The episode is known from ``affinity``, a context variable the rollout runner sets per episode
task; calls made outside an episode (the meta-LLM) just take the least busy replica.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, replace

from automem_dagster.llm.client import Completion, ContextOverflow, EndpointError, LLMClient
from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.slot_turns import episode as affinity


@contextmanager
def episode_affinity(key: str, clients: Iterable[object]):
    """Calls made inside stay on one replica while it is healthy; on leaving, the replicated
    ones among ``clients`` forget the episode, so their count of episodes per replica stays true."""
    token = affinity.set(key)
    try:
        yield
    finally:
        affinity.reset(token)
        for client in clients:
            if isinstance(client, ReplicatedClient):
                client.release(key)


@dataclass
class _Replica:
    client: LLMClient
    outstanding: int = 0
    episodes: int = 0
    down_until: float = 0.0
    failures: int = 0

    def healthy(self, now: float) -> bool:
        return now >= self.down_until


def _cause(exc: EndpointError) -> str:
    return "connection" if exc.status is None else f"http_{exc.status}"


def _replica_fault(exc: EndpointError) -> bool:
    """Whether another replica might succeed: unreachable, or a server-side error."""
    return not isinstance(exc, ContextOverflow) and (exc.status is None or exc.status >= 500)


class ReplicatedClient:
    """``LLMClient``'s interface over every base URL of one endpoint."""

    def __init__(self, config: EndpointConfig, cooldown_s: float = 30.0):
        self.config = config
        self.base_url = config.base_url
        self.cooldown_s = cooldown_s
        self._replicas = [_Replica(LLMClient(config, url)) for url in config.base_urls()]
        self._assigned: dict[str, _Replica] = {}

    def _pick(self, key: str | None, avoid: set[int], lost: Counter) -> _Replica:
        now = time.monotonic()
        current = self._assigned.get(key) if key is not None else None
        if current is not None and current.healthy(now) and id(current) not in avoid:
            return current
        candidates = [r for r in self._replicas if r.healthy(now) and id(r) not in avoid]
        if not candidates:
            urls = ", ".join(r.client.base_url for r in self._replicas)
            raise EndpointError(f"endpoint {self.config.name!r}: none of its {len(self._replicas)} replicas ({urls}) "
                                "is answering; start them or remove the dead ones from `replicas`",
                                None, self.config.name, urls, dict(lost))
        chosen = min(candidates, key=lambda r: (r.outstanding, r.episodes, self._replicas.index(r)))
        if key is not None:
            if current is not None:
                current.episodes -= 1
            chosen.episodes += 1
            self._assigned[key] = chosen
        return chosen

    async def complete(self, messages: list[dict], *args, **options) -> Completion:
        """One chat completion (``LLMClient.complete``'s arguments, passed on as given) on a healthy replica.
        Attempts lost on replicas that failed count as retries of the call, by cause and time."""
        key, tried, lost, lost_s = affinity.get(), set(), Counter(), 0.0
        while True:
            replica = self._pick(key, tried, lost)
            replica.outstanding += 1
            started = time.perf_counter()
            try:
                completion = await replica.client.complete(messages, *args, **options)
            except EndpointError as exc:
                if not _replica_fault(exc):
                    raise
                replica.failures += 1
                replica.down_until = time.monotonic() + self.cooldown_s
                tried.add(id(replica))
                lost.update(exc.failures or {_cause(exc): 1})
                lost_s += time.perf_counter() - started
                continue
            finally:
                replica.outstanding -= 1
            if not lost:
                return completion
            return replace(completion, attempts=completion.attempts + lost.total(),
                           retries=dict(Counter(completion.retries) + lost), retry_s=completion.retry_s + lost_s)

    def replica_clients(self) -> list[LLMClient]:
        """One plain client per replica, for probing each server on its own (``automem endpoints check``)."""
        return [r.client for r in self._replicas]

    @property
    def first_reply(self) -> dict | None:
        """The first answer's ``model`` and ``system_fingerprint`` of the first replica that answered."""
        return next((r.client.first_reply for r in self._replicas if r.client.first_reply is not None), None)

    def release(self, key: str) -> None:
        """Forget an episode's replica (it finished), so the count of episodes per replica stays true."""
        replica = self._assigned.pop(key, None)
        if replica is not None:
            replica.episodes -= 1

    def status(self) -> list[dict]:
        """Per replica: its URL, requests in flight, episodes kept there, failures and whether it is up."""
        now = time.monotonic()
        return [{"base_url": r.client.base_url, "outstanding": r.outstanding, "episodes": r.episodes,
                 "failures": r.failures, "up": r.healthy(now)} for r in self._replicas]

    async def close(self) -> None:
        for replica in self._replicas:
            await replica.client.close()
