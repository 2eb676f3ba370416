"""Every HTTP attempt of a model call, with why each failed one failed.

The ``openai`` client retries transient failures itself (connection errors, timeouts, 408,
409, 429 and 5xx, backing off and honouring ``Retry-After``) and reports only the last
failure, so a turn that succeeded on its third attempt looks like a slow turn. To keep retries
apart from model latency, the client's HTTP client notes each attempt with its start time and
its outcome (an HTTP status, a timeout, a dropped or refused connection). A call's retries by cause, the time they
cost (failed attempts and backoff, up to the start of the last attempt) and the latency of the
last attempt alone come out of that record.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial

import aiohttp
import httpx2
import openai

from automem_dagster.llm.progress import ServerProgress, watched_timeout

TIMEOUT, CONNECTION = "timeout", "connection"
"""Causes of an attempt that got no answer; one with an error status is ``http_<status>``."""


@dataclass
class Attempt:
    start: float
    cause: str | None = None
    """Why it failed, or None while it looks good (an answer under 400)."""


@dataclass
class CallLog:
    """The attempts of one ``LLMClient.complete`` call, in order."""

    started: float = field(default_factory=time.perf_counter)
    attempts: list[Attempt] = field(default_factory=list)

    def failures(self) -> dict[str, int]:
        """Failed attempts by cause: for a call that succeeded, the retries it took."""
        return dict(Counter(a.cause for a in self.attempts if a.cause is not None))

    def retry_s(self) -> float:
        """Time lost from the first attempt to the last: failed attempts and the backoff between them
        (exactly 0 for a call answered at its first attempt)."""
        return self.attempts[-1].start - self.attempts[0].start if self.attempts else 0.0

    def latency_s(self) -> float:
        """The last attempt's time: the model's latency, without the retries before it."""
        return time.perf_counter() - (self.attempts[-1].start if self.attempts else self.started)


CURRENT_CALL: ContextVar[CallLog | None] = ContextVar("automem_current_call", default=None)
"""The call under way in this task; the transport adds its attempts there."""


def cause_of(error: BaseException) -> str:
    return TIMEOUT if isinstance(error, httpx2.TimeoutException | TimeoutError) else CONNECTION


def httpx_error(error: Exception) -> Exception:
    """``error`` as httpx names it. The aiohttp adapter vendored in openai 3.57
    (``openai/_vendor/httpx_aiohttp/transport.py``, ``AIOHTTP_EXC_MAP``) turns every
    ``aiohttp.ClientConnectionError`` that is not a timeout, a refused connection or a server that
    hung up included, into ``httpx.ConnectTimeout``: the SDK would then raise ``APITimeoutError`` and the
    attempt would count as a timeout. Such an error is named as httpx's own transport names it instead:
    ``ConnectError`` for a connection not made, ``RemoteProtocolError`` for a server that closed it
    without an answer, ``ReadError`` for one reset under a request."""
    cause = error.__cause__
    if not isinstance(error, httpx2.ConnectTimeout) or not isinstance(cause, aiohttp.ClientConnectionError) \
            or isinstance(cause, TimeoutError):
        return error
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(str(cause))
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx2.RemoteProtocolError(str(cause))
    return httpx2.ReadError(str(cause))


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """The TLS context every pool of this process verifies servers with: httpx's default (certifi's
    CA bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as set when it is first needed). httpx builds one
    per client otherwise, and loading the CA bundle costs about 30 ms of CPU: with a pool per lane
    that was 64 contexts for 64 episodes at once, 1-1.5 ms per step of a 20-30 step episode
    (``benchmarks/rollout_scaling.py``). A context may verify any number of connections at once."""
    return httpx2.create_ssl_context()


class CountingHttpClient(openai.DefaultAioHttpClient):
    """The openai client's aiohttp-backed HTTP client, noting each attempt in the current ``CallLog``.

    aiohttp instead of httpx's own transport (httpcore): with 64 episodes at once, the SDK's request
    path through httpcore was a third of the event loop's time (its pool scan, a readability poll of
    each idle connection per request, and its HTTP/1.1 state machine); aiohttp's connector learns of a
    closed connection from the event loop instead (``benchmarks/rollout_scaling.py``). The SDK's
    retries, timeouts, proxies from the environment and error statuses are unchanged: its request
    path is httpx's client as before, only the transport under it differs.

    The SDK sends every attempt through ``send`` and, for a completion that is not streamed,
    ``send`` also reads the body, so a timeout or a connection dropped mid-body is caught too.
    Its TLS context is the process's one (``shared_ssl_context``) unless ``verify`` is given. With
    ``progress`` (a llama.cpp server that shows its slots) an attempt waits as long as the server
    makes progress instead of for a fixed read timeout (``llm/progress.py``)."""

    def __init__(self, progress: ServerProgress | None = None, **kwargs) -> None:
        kwargs.setdefault("verify", shared_ssl_context())
        super().__init__(**kwargs)
        self.progress = progress

    async def _attempt(self, request: httpx2.Request, **kwargs) -> httpx2.Response:
        """One HTTP attempt: watched by ``progress`` when the server shows it, else under the request's timeout."""
        if self.progress is None or not await self.progress.watches():
            return await super().send(request, **kwargs)
        request.extensions["timeout"] = watched_timeout(request.extensions.get("timeout", {}))
        return await self.progress.guard(partial(openai.DefaultAioHttpClient.send, self, request, **kwargs))

    async def send(self, request: httpx2.Request, **kwargs) -> httpx2.Response:
        log = CURRENT_CALL.get()
        attempt = Attempt(time.perf_counter())
        if log is not None:
            log.attempts.append(attempt)
        try:
            response = await self._attempt(request, **kwargs)
        except Exception as exc:
            error = httpx_error(exc)
            attempt.cause = cause_of(error)
            if error is exc:
                raise
            raise error from exc.__cause__
        if response.status_code >= 400:
            attempt.cause = f"http_{response.status_code}"
        return response


def cause_label(cause: str) -> str:
    """``http_500`` -> ``HTTP 500``; ``timeout`` and ``connection`` stay as they are."""
    return cause.replace("http_", "HTTP ")


def describe_failures(failures: dict[str, int]) -> str:
    """``{"http_500": 2, "timeout": 1}`` -> ``"2 × HTTP 500, 1 × timeout"``."""
    return ", ".join(f"{n} × {cause_label(cause)}" for cause, n in sorted(failures.items()))
