"""Calls to one endpoint through the ``openai`` client, with retries and accounting.

Each call returns its text together with the tokens and latency it cost, because
trajectories record cost per call and the behaviour metrics are computed from them. Failures
that retrying cannot fix (bad key, unknown model) surface at once as ``EndpointError``
naming the endpoint; transient ones (connection refused, timeouts, 5xx, 429) are retried
with exponential backoff a bounded number of times.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass

import openai

from automem_dagster.llm.config import EndpointConfig

_TRANSIENT = (
    openai.APIConnectionError,
    openai.APITimeoutError,
    openai.RateLimitError,
    openai.InternalServerError,
)


class EndpointError(RuntimeError):
    """An endpoint could not produce a completion; the message says which and what to do."""


class ContextOverflow(EndpointError):
    """The prompt did not fit the endpoint's context: the caller can send a shorter one."""


# How llama.cpp, vLLM and OpenAI word a prompt longer than the context window (HTTP 400).
_OVERFLOW = re.compile(r"context (size|length|window)|context_length_exceeded|maximum context", re.IGNORECASE)


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    attempts: int
    finish_reason: str | None


class LLMClient:
    """An async client for one configured endpoint. ``base_url`` must be resolved (not ``embedded``)."""

    def __init__(self, config: EndpointConfig, base_url: str):
        self.config = config
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=config.api_key(), timeout=config.timeout_s, max_retries=0
        )

    async def complete(self, messages: list[dict], grammar: str | None = None,
                       json_schema: dict | None = None, max_tokens: int | None = None,
                       seed: int | None = None) -> Completion:
        """One chat completion, constrained by ``grammar`` (a GBNF grammar) or ``json_schema``
        when the endpoint's dialect allows it; with ``constrained: none`` neither is sent and
        the caller validates the reply as it would anyway. ``max_tokens`` replaces the endpoint's
        for a caller whose grammar bounds a longer reply (a reasoning line before the action).
        ``seed`` is the request's sampling seed; an endpoint file's own ``seed`` wins over it."""
        cfg = self.config
        extra: dict = {}
        if grammar is not None and cfg.constrained == "gbnf":
            extra["grammar"] = grammar
        elif grammar is not None and cfg.constrained == "vllm":
            extra["structured_outputs"] = {"grammar": grammar}
        response_format = None
        if json_schema is not None and cfg.constrained != "none":
            # OpenAI's structured-output form, which llama.cpp and vLLM both accept.
            response_format = {"type": "json_schema", "json_schema": {"name": "reply", "schema": json_schema}}
        if cfg.constrained == "gbnf" and not cfg.cache_prompt:
            extra["cache_prompt"] = False
        if cfg.lora_id is not None:
            extra["lora"] = [{"id": cfg.lora_id, "scale": 1.0}]
        kwargs = dict(
            model=cfg.model,
            messages=messages,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=max_tokens or cfg.max_tokens,
            extra_body=extra or None,
        )
        if response_format is not None:
            kwargs["response_format"] = response_format
        if cfg.seed is not None or seed is not None:
            kwargs["seed"] = cfg.seed if cfg.seed is not None else seed
        if cfg.frequency_penalty is not None:
            kwargs["frequency_penalty"] = cfg.frequency_penalty
        start = time.perf_counter()
        for attempt in range(1, cfg.max_retries + 2):
            try:
                resp = await self._client.chat.completions.create(**kwargs)
                break
            except _TRANSIENT as exc:
                if attempt > cfg.max_retries:
                    raise EndpointError(
                        f"endpoint {cfg.name!r} failed {attempt} times ({type(exc).__name__}: {exc}); "
                        "check that the server is running and reachable, or raise timeout_s/max_retries"
                    ) from exc
                await asyncio.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            except openai.APIStatusError as exc:
                if exc.status_code == 400 and _OVERFLOW.search(str(exc)):
                    raise ContextOverflow(f"endpoint {cfg.name!r}: the prompt exceeds its context ({_short(str(exc))})") from exc
                raise EndpointError(
                    f"endpoint {cfg.name!r} refused the request with HTTP {exc.status_code}: "
                    f"{_short(str(exc))}; check model name, API key variable and request options"
                ) from exc
        latency = time.perf_counter() - start
        choice = resp.choices[0] if resp.choices else None
        text = (choice.message.content if choice and choice.message else None) or ""
        usage = resp.usage
        return Completion(
            text=text,
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            latency_s=latency,
            attempts=attempt,
            finish_reason=choice.finish_reason if choice else None,
        )

    async def close(self) -> None:
        await self._client.close()


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
