"""Calls to one endpoint through the ``openai`` client, with retries and accounting.

Each call returns its text together with the tokens and latency it cost, because
trajectories record cost per call and the behaviour metrics are computed from them. Failures
that retrying cannot fix (bad key, unknown model, a refused parameter) surface at once as
``EndpointError`` naming the endpoint and its server; transient ones (connection refused,
timeouts, 408/409/429/5xx) are retried by the openai client itself, which backs off
exponentially and honours a server's ``Retry-After``, so a batch of concurrent episodes does
not hammer a provider that is rate-limiting it. Every HTTP attempt of a call is noted
(``llm.attempts``), so each turn records its attempts, its retries by cause and the time they
cost apart from the model's latency, and a call that gave up says what failed how often.
"""

from __future__ import annotations

import asyncio
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial

import openai

from automem_dagster.cpu_ledger import LEDGER
from automem_dagster.llm.attempts import CURRENT_CALL, CallLog, CountingHttpClient, describe_failures
from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.progress import ServerProgress
from automem_dagster.llm.slot_turns import SlotTurns

_TRANSIENT = (
    openai.APIConnectionError,
    openai.APITimeoutError,
    openai.RateLimitError,
    openai.InternalServerError,
)


class EndpointError(RuntimeError):
    """An endpoint could not produce a completion; the message says which and what to do.
    ``status`` is the server's HTTP status when it answered, None when it could not be reached;
    ``endpoint`` and ``base_url`` name the server (unset where no call was made) and ``failures``
    counts the failed attempts by cause (``http_500``, ``timeout``, ``connection``)."""

    def __init__(self, message: str, status: int | None = None, endpoint: str | None = None,
                 base_url: str | None = None, failures: dict[str, int] | None = None):
        super().__init__(message)
        self.status = status
        self.endpoint = endpoint
        self.base_url = base_url
        self.failures = failures or {}


def refused_request(exc: BaseException) -> EndpointError | None:
    """The ``EndpointError`` in ``exc``'s cause chain whose server refused the request itself (HTTP 4xx
    other than 408, 409 and 429), else None. Sending such a request again cannot succeed, so an
    orchestrator's retry (with its minutes of backoff) is skipped and the message's advice is read."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, EndpointError) and seen.status and 400 <= seen.status < 500 \
                and seen.status not in (408, 409, 429):
            return seen
        seen = seen.__cause__
    return None


class ContextOverflow(EndpointError):
    """The prompt did not fit the endpoint's context: the caller can send a shorter one."""


# How llama.cpp, vLLM and OpenAI word a prompt longer than the context window (HTTP 400), and Anthropic:
# "prompt is too long: 210000 tokens > 200000 maximum" (its API errors page, invalid_request_error).
_OVERFLOW = re.compile(r"context (size|length|window)|context_length_exceeded|maximum context|prompt is too long",
                       re.IGNORECASE)


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    """The model's time: the last attempt alone, without the retries before it."""
    attempts: int
    finish_reason: str | None
    cached_tokens: int | None = None
    """Input tokens served from the server's prompt cache, as the server reports them; None when it does not."""
    tool_calls: tuple[dict, ...] = ()
    """The tool calls of a reply to a request with ``tools``: ``{"id", "name", "arguments"}`` each,
    ``arguments`` the JSON string the server sent (OpenAI's chat-completions format)."""
    retries: dict[str, int] = field(default_factory=dict)
    """The failed attempts before the answer, by cause (``http_429``, ``timeout``, ``connection``)."""
    retry_s: float = 0.0
    """Time lost to those retries: the failed attempts and the backoff after each."""


@dataclass(frozen=True)
class Embeddings:
    """The vectors of one embeddings request and what it cost (an embedding has no output tokens)."""

    vectors: list[list[float]]
    input_tokens: int
    latency_s: float
    attempts: int
    retries: dict[str, int] = field(default_factory=dict)
    retry_s: float = 0.0


@LEDGER.charged("request")
def request_body(config: EndpointConfig, messages: list[dict], grammar: str | None = None,
                 json_schema: dict | None = None, schema_name: str = "reply", max_tokens: int | None = None,
                 seed: int | None = None, tools: list[dict] | None = None, tool_choice: str | None = None,
                 id_slot: int | None = None, reuse_cache: bool = True) -> dict:
    """The keyword arguments of one chat-completions request, exactly as they are sent.

    Only what the endpoint file sets is sent (sampling, the output cap under its configured
    field name, ``extra_body``). A grammar goes out in the server's dialect; a JSON schema as
    OpenAI's ``response_format`` with ``strict: true``, which vLLM and llama.cpp accept too;
    with ``constrained: none`` neither is sent. ``seed`` is the request's sampling seed; an
    endpoint file's own ``seed`` wins over it. ``tools`` and ``tool_choice`` are OpenAI's function
    calling fields, sent as given (``meta/tool_session.py``). ``id_slot`` pins the request to one
    llama.cpp server slot (its server README: ``id_slot``), so an episode keeps its cached prompt prefix;
    ``reuse_cache`` False has a llama.cpp server read the prompt from scratch (``llm/slot_turns.py``)."""
    cfg = config
    extra: dict = dict(cfg.extra_body)
    if grammar is not None and cfg.constrained == "gbnf":
        extra["grammar"] = grammar
    elif grammar is not None and cfg.constrained == "vllm":
        extra["structured_outputs"] = {"grammar": grammar}
    if cfg.server == "llama.cpp" and not (cfg.cache_prompt and reuse_cache):
        extra["cache_prompt"] = False
    if id_slot is not None and cfg.server == "llama.cpp":
        extra["id_slot"] = id_slot
    if cfg.lora_id is not None:
        extra["lora"] = [{"id": cfg.lora_id, "scale": 1.0}]
    body: dict = {"model": cfg.model, "messages": messages, **cfg.sampling(),
                  cfg.max_tokens_field: max_tokens or cfg.max_tokens}
    if json_schema is not None and cfg.constrained != "none":
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": schema_name, "schema": json_schema, "strict": True}}
    if tools:
        body["tools"] = tools
        body["tool_choice"] = tool_choice or "auto"
    if cfg.seed is not None or seed is not None:
        body["seed"] = cfg.seed if cfg.seed is not None else seed
    if extra:
        body["extra_body"] = extra
    return body


class LLMClient:
    """An async client for one configured endpoint. ``base_url`` must be resolved (not ``embedded``)."""

    def __init__(self, config: EndpointConfig, base_url: str, slots: int | None = None, turns: SlotTurns | None = None):
        self.config = config
        self.base_url = base_url
        self.slots = slots
        """The server's parallel slots when known (the embedded server): a call's ``lane`` picks one."""
        self.turns = turns
        """The embedded server's turns, shared by its clients: one request at a time (``llm/slot_turns.py``)."""
        self.first_reply: dict | None = None
        """The ``model`` and ``system_fingerprint`` of the first answer: what a hosted API says of the model
        that served it (``llm/server_info.py``), recorded in the batch's identity as observed."""
        self.progress = ServerProgress(base_url.removesuffix("/").removesuffix("/v1"), config.timeout_s) \
            if config.server == "llama.cpp" else None
        """A llama.cpp server's slots, watched so that a slow server is waited for (``llm/progress.py``)."""
        self._pools: dict[int | None, openai.AsyncOpenAI] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self, lane: int | None = None) -> openai.AsyncOpenAI:
        """The openai client (and so the connection pool) of ``lane`` under the running event loop.

        A lane (an episode's place among those played at once) has one call in flight at a time, so
        its pool holds one kept-alive connection: httpcore looks at every connection of a pool for
        each request (``has_expired``, a readability poll per idle connection), which with one pool
        for 64 episodes was a sixth of the event loop's time (``benchmarks/rollout_scaling.py``).
        Servers keep connections alive (vLLM's uvicorn, llama.cpp's server), and a pooled connection
        belongs to the loop that opened it: a client used again under another loop (a second
        ``asyncio.run``) gets pools of its own instead of connections whose loop is closed."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._pools, self._loop = {}, loop
        if lane not in self._pools:
            self._pools[lane] = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.config.api_key(),
                                                   timeout=self.config.timeout_s, max_retries=self.config.max_retries,
                                                   http_client=CountingHttpClient(self.progress))
        return self._pools[lane]

    def _where(self) -> str:
        return f"endpoint {self.config.name!r} ({self.config.model} at {self.base_url})"

    async def complete(self, messages: list[dict], grammar: str | None = None,
                       json_schema: dict | None = None, max_tokens: int | None = None,
                       seed: int | None = None, schema_name: str = "reply", tools: list[dict] | None = None,
                       tool_choice: str | None = None, lane: int | None = None) -> Completion:
        """One chat completion, constrained by ``grammar`` (a GBNF grammar) or ``json_schema``
        as the endpoint's mode allows (see ``request_body``); the caller validates the reply
        as it would anyway. ``max_tokens`` replaces the endpoint's for a caller whose grammar
        bounds a longer reply (a reasoning line before the action). With ``tools`` the reply may
        hold ``tool_calls`` instead of text. ``lane`` (an episode's place among those running at once)
        pins the call to slot ``lane % slots`` when the slots are known."""
        id_slot = lane % self.slots if lane is not None and self.slots else None
        async with self.turns.turn(id_slot) if self.turns else nullcontext(True) as reuse:
            body = request_body(self.config, messages, grammar, json_schema, schema_name, max_tokens, seed, tools,
                                tool_choice, id_slot, reuse)
            resp, log = await self._send(partial(self._chat_completion, lane), body)
        latency = log.latency_s()
        with LEDGER.phase("parse"):
            return self._completion(resp, log, latency)

    def _completion(self, resp: object, log: CallLog, latency: float) -> Completion:
        """The ``Completion`` of a chat completion's JSON."""
        if not isinstance(resp, dict):
            raise EndpointError(f"{self._where()} answered a chat completion with something other than a JSON object "
                                f"({_short(str(resp), 200)!r}); check base_url (it usually ends in /v1)", None,
                                self.config.name, self.base_url)
        if self.first_reply is None:
            self.first_reply = {"model": resp.get("model"), "system_fingerprint": resp.get("system_fingerprint")}
        choice = (resp.get("choices") or [None])[0] or {}
        message = choice.get("message") or {}
        usage = resp.get("usage") or {}
        return Completion(
            text=message.get("content") or "",
            input_tokens=usage.get("prompt_tokens") or 0,
            output_tokens=usage.get("completion_tokens") or 0,
            latency_s=latency,
            attempts=max(len(log.attempts), 1),
            finish_reason=choice.get("finish_reason"),
            cached_tokens=cached_tokens(resp),
            tool_calls=_tool_calls(message),
            retries=log.failures(),
            retry_s=log.retry_s(),
        )

    async def _chat_completion(self, lane: int | None, extra_body: dict | None = None, **body) -> object:
        """``POST /chat/completions`` through the openai client's own request path (its retries, backoff,
        timeouts and error statuses, as ``chat.completions.create``), with the reply left as the JSON the
        server sent: ``create`` builds typed request and response models, about 1.5 ms of CPU a call that
        at 64 episodes at once was a fifth of the event loop's time (``benchmarks/rollout_scaling.py``).
        ``extra_body`` goes into the JSON body, as ``create`` sends it; ``lane`` picks the pool (``_client``)."""
        return await self._client(lane).post("/chat/completions", body={**body, **(extra_body or {})}, cast_to=object)

    async def embed(self, texts: list[str]) -> Embeddings:
        """Embeddings of ``texts`` from the OpenAI-compatible ``/v1/embeddings`` route, one vector per
        text in order. ``encoding_format`` is sent as ``float``: the openai client asks for base64
        otherwise, which not every compatible server offers."""
        body = {"model": self.config.model, "input": list(texts), "encoding_format": "float"}
        resp, log = await self._send(self._client().embeddings.create, body)
        vectors = [list(map(float, d.embedding)) for d in sorted(resp.data, key=lambda d: d.index)]
        if len(vectors) != len(texts):
            raise EndpointError(f"{self._where()} returned {len(vectors)} embeddings for {len(texts)} inputs; "
                                "check that the server's model serves embeddings", None, self.config.name, self.base_url)
        return Embeddings(vectors, resp.usage.prompt_tokens if resp.usage else 0, log.latency_s(),
                          max(len(log.attempts), 1), log.failures(), log.retry_s())

    async def _send(self, create, body: dict):
        """One request through the openai client (``create`` with ``body``), with every attempt noted and
        its failures turned into ``EndpointError`` naming this endpoint and what to do."""
        log = CallLog()
        token = CURRENT_CALL.set(log)
        try:
            return await create(**body), log
        except _TRANSIENT as exc:
            raise self._error(
                f"{self._where()} failed after {max(len(log.attempts), 1)} attempts "
                f"({describe_failures(log.failures()) or type(exc).__name__}; last: {type(exc).__name__}: "
                f"{_short(str(exc))}); check that the server is running and reachable, or raise timeout_s/max_retries",
                log, getattr(exc, "status_code", None)) from exc
        except openai.APIStatusError as exc:
            if exc.status_code == 400 and _OVERFLOW.search(str(exc)):
                raise self._error(f"{self._where()}: the prompt exceeds its context ({_short(str(exc))})", log,
                                  exc.status_code, ContextOverflow) from exc
            raise self._error(
                f"{self._where()} refused the request with HTTP {exc.status_code}: {_short(str(exc))}; "
                f"{_advice(exc.status_code)}", log, exc.status_code
            ) from exc
        finally:
            CURRENT_CALL.reset(token)

    def _error(self, message: str, log: CallLog, status: int | None,
               kind: type[EndpointError] = EndpointError) -> EndpointError:
        return kind(message, status, self.config.name, self.base_url, log.failures())

    async def close(self) -> None:
        if self._loop is asyncio.get_running_loop():
            for client in self._pools.values():
                await client.close()
        self._pools, self._loop = {}, None


def cached_tokens(resp: dict) -> int | None:
    """The prompt tokens a server reused from its cache, from its chat completion as it sent it: OpenAI's
    and vLLM's ``usage.prompt_tokens_details.cached_tokens`` (vLLM fills it only when started with
    ``--enable-prompt-tokens-details``, else None: docs/vllm.md), else llama.cpp's ``timings.cache_n``
    (its server README: ``cache_n`` prompt tokens reused from the cache, ``prompt_n`` processed anew)."""
    details = (resp.get("usage") or {}).get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return details["cached_tokens"]
    timings = resp.get("timings")
    if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
        return timings["cache_n"]
    return None


def _tool_calls(message: dict) -> tuple[dict, ...]:
    calls = message.get("tool_calls") or []
    return tuple({"id": c.get("id"), "name": c["function"].get("name"), "arguments": c["function"].get("arguments") or ""}
                 for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict))


def _advice(status: int) -> str:
    if status in (401, 403):
        return "check the API key variable (api_key_env) and that the key may use this model"
    if status == 404:
        return "check base_url (it usually ends in /v1) and the model name the server lists at /v1/models"
    return ("check the request options in the endpoints file: a provider may refuse a parameter "
            "(drop temperature or top_p, set max_tokens_field: max_completion_tokens, or pick another constrained mode)")


def _short(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
