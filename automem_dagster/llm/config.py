"""Named LLM endpoints as configuration.

Every model AutoMem-Dagster talks to (the game model, the memory specialist, the meta-LLM)
is an OpenAI-compatible endpoint described here, so moving from the embedded local model to
vLLM or a hosted API is an edit to a YAML file, never to code. API keys are referenced by the
name of an environment variable and are never stored in the config.

Providers disagree on request parameters (a reasoning model refuses ``temperature`` and wants
``max_completion_tokens``; some APIs refuse ``temperature`` together with ``top_p``), so every
sampling parameter is optional and sent only when the file sets it, the output cap's field
name is a setting, and ``extra_body`` passes provider-specific fields through untouched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, Tag, field_validator, model_validator

from automem_dagster.datafiles import load_yaml_model

EMBEDDED = "embedded"
"""A ``base_url`` of this value means: the local server the project starts itself."""
RULES = "rules"
"""The rules meta's kind and the name records give it (``RulesMeta``)."""

ENDPOINT_ROLES = ("game", "memory", "meta")

Constrained = Literal["gbnf", "vllm", "json_schema", "none"]
"""How replies are constrained: ``gbnf`` (llama.cpp's ``grammar`` field), ``vllm`` (vLLM's
``structured_outputs`` grammar), ``json_schema`` (every turn and meta call as one JSON object
under ``response_format`` with ``strict: true``: OpenAI, Anthropic's and Google's compatible
layers, vLLM, llama.cpp) or ``none`` (free text, parsed tolerantly)."""

MetaMode = Literal["one_call", "tools"]
"""How the meta-LLM reads a batch: ``one_call`` (the batch compressed into one request) or
``tools`` (it calls read-only tools over the batch, ``meta/tool_session.py``; the server must
support OpenAI function calling)."""

ServerKind = Literal["llama.cpp", "vllm", "openai-compatible"]
"""What is behind ``base_url``, for the features beyond the chat API: exact token counts
(llama.cpp's and vLLM's ``/tokenize``) and runtime LoRA loading (vLLM)."""

DERIVED_MODE: dict[str, Constrained] = {"llama.cpp": "gbnf", "vllm": "vllm", "openai-compatible": "json_schema"}
"""The ``constrained`` mode an endpoint gets from its ``server`` when the file sets none: the one
that server's decoder honours. A mode the server does not read would go out with HTTP 200 and
play unconstrained (vLLM accepts unknown request fields and drops them: ``OpenAIBaseModel`` is
``extra="allow"`` and logs their names at warning level in the server's own log only,
``OpenAIBaseModel.__log_extra_fields__`` in vllm/entrypoints/openai/engine/protocol.py,
vllm-project/vllm commit 040a2cc2)."""

_MODE_SERVERS = {"gbnf": "llama.cpp", "vllm": "vllm"}
"""Modes only one server family reads: ``grammar`` is llama.cpp's field, ``structured_outputs`` vLLM's."""

ANTHROPIC_HOST = "api.anthropic.com"
IGNORED_FIELDS: dict[str, tuple[str, ...]] = {ANTHROPIC_HOST: (
    "logprobs", "metadata", "response_format", "prediction", "presence_penalty", "frequency_penalty", "seed",
    "service_tier", "audio", "logit_bias", "store", "user", "modalities", "top_logprobs", "reasoning_effort")}
"""Request fields a hosted API accepts and ignores, by host: Anthropic's OpenAI SDK compatibility page
(docs.claude.com/en/api/openai-sdk, "Request fields", every field whose support status is "Ignored").
The project sends ``response_format`` and per-request seeds itself and records that they are ignored
(``server_rules.reply_schema_kind``, ``agent/sampling.seed_support``); an endpoint file that sets one of
these fields is refused (``EndpointConfig._provider_reads_what_is_set``), as it would change nothing."""

TEMPERATURE_CAP: dict[str, float] = {ANTHROPIC_HOST: 1.0}
"""The highest temperature a hosted API samples at, by host: Anthropic's layer takes 0 to 1 and caps
higher values at 1 (same page, ``temperature``), so a file asking for more is refused."""

_RESERVED_BODY = frozenset({"model", "messages", "stream", "response_format", "n"})
"""Request fields the project sets itself; ``extra_body`` may not override them."""


class EndpointConfig(BaseModel):
    """One OpenAI-compatible endpoint.

    ``base_url`` unset means ``$OPENAI_BASE_URL`` when that is set, else the embedded server;
    ``api_key_env`` unset means ``$OPENAI_API_KEY`` when that is set (remote servers only).
    ``lora_id`` selects a LoRA adapter loaded in a llama.cpp server per request (its ``lora``
    field; vLLM and hosted APIs ignore it, so it is refused there). ``constrained`` unset is the
    mode ``server`` honours (``DERIVED_MODE``); ``constrained_derived`` says it was derived.
    """

    model_config = ConfigDict(extra="forbid")
    _constrained_derived: bool = PrivateAttr(False)

    name: str
    base_url: str | None = None
    replicas: list[str] = Field(default_factory=list, description="further base URLs serving the same model: "
                                "requests spread over all of them (llm/replicas.py)")
    model: str = "smollm2-135m-instruct"
    api_key_env: str | None = None
    server: ServerKind | None = Field(None, description="unset: llama.cpp for the embedded server, else openai-compatible")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="sent only when set")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="sent only when set")
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0, description="sent only when set")
    max_tokens: int = Field(160, ge=1, le=131_072)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    extra_body: dict[str, Any] = Field(default_factory=dict, description="provider-specific request fields, sent as given")
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10, description="retries of transient failures, honouring Retry-After")
    constrained: Constrained | None = Field(None, description="unset: derived from server (DERIVED_MODE)")
    context_tokens: int = Field(8192, ge=512, description="context window; long meta-LLM inputs are compressed to fit")
    lora_id: int | None = None
    max_lora_rank: int | None = Field(None, ge=1, le=512, description="a vLLM server's --max-lora-rank: trained "
                                      "specialists stay within it")
    seed: int | None = None
    meta_mode: MetaMode = Field("one_call", description="meta role only: one_call or tools (docs/meta-tools.md)")
    meta_tool_calls: int = Field(24, ge=1, le=500, description="meta_mode tools: tool calls per diagnosis")
    meta_token_budget: int = Field(200_000, ge=1_000, description="meta_mode tools: prompt and reply tokens of "
                                   "all requests of one diagnosis together")
    cache_prompt: bool = Field(True, description="llama.cpp: reuse a cached prompt prefix (fast); false makes "
                                                 "seeded reruns bit-identical (llama.cpp's README)")
    batch_invariant: bool = Field(False, description="vLLM only: the server runs with VLLM_BATCH_INVARIANT=1, so a "
                                  "request's result does not depend on what is batched with it (docs/vllm.md)")

    @model_validator(mode="after")
    def _resolve_defaults(self) -> EndpointConfig:
        if self.base_url is None:
            self.base_url = os.environ.get("OPENAI_BASE_URL") or EMBEDDED
        if self.server is None:
            self.server = "llama.cpp" if self.base_url == EMBEDDED else "openai-compatible"
        self._constrained_derived = self.constrained is None or self._constrained_derived  # kept on revalidation
        if self.constrained is None:
            self.constrained = DERIVED_MODE[self.server]
        return self

    @field_validator("base_url")
    @classmethod
    def _not_the_rules_meta(cls, url: str | None) -> str | None:
        """The rules meta used to be spelled as this fake URL; it is a meta kind now (``RulesMeta``)."""
        if url == RULES:
            raise ValueError(f"base_url {RULES!r} is not an endpoint: the rules meta is a kind of meta, not a server; "
                             f"write `meta: {{kind: {RULES}}}` in the endpoints file (or pass --meta {RULES})")
        return url

    @model_validator(mode="after")
    def _server_reads_what_is_sent(self) -> EndpointConfig:
        """Refuse a mode or ``lora_id`` the server would accept and ignore: the round would play
        unconstrained, or on the base model, and nothing would say so."""
        needs = _MODE_SERVERS.get(self.constrained)
        if needs is not None and self.server != needs:
            raise ValueError(f"constrained: {self.constrained} is read by {needs} only, and this endpoint's server is "
                             f"{self.server}, which would ignore it and decode unconstrained: set constrained: "
                             f"{DERIVED_MODE[self.server]} (or leave it unset), or server: {needs} if that is what runs")
        if self.lora_id is not None and self.server != "llama.cpp":
            raise ValueError(f"lora_id selects an adapter of a llama.cpp server; a {self.server} server ignores it and "
                             "would answer with the base model: for vLLM name the adapter as `model` (docs/vllm.md), "
                             "or set server: llama.cpp if that is what runs")
        return self

    @model_validator(mode="after")
    def _provider_reads_what_is_set(self) -> EndpointConfig:
        """Refuse a field the provider at ``base_url`` accepts and ignores (``IGNORED_FIELDS``), and a
        temperature above its cap (``TEMPERATURE_CAP``): the run would sample otherwise than the file says."""
        host = next((h for h in IGNORED_FIELDS if h in (self.base_url or "")), None)
        if host is None:
            return self
        set_here = {"frequency_penalty": self.frequency_penalty, "seed": self.seed, **self.extra_body}
        ignored = [name for name in IGNORED_FIELDS[host] if set_here.get(name) is not None]
        if ignored:
            raise ValueError(f"endpoint {self.name!r} sets {', '.join(ignored)}, which {host} accepts and ignores "
                             "(its OpenAI SDK compatibility page): remove them from the endpoint file")
        cap = TEMPERATURE_CAP.get(host)
        if cap is not None and self.temperature is not None and self.temperature > cap:
            raise ValueError(f"endpoint {self.name!r} sets temperature {self.temperature}, but {host} caps temperature "
                             f"at {cap} (its OpenAI SDK compatibility page): set temperature between 0 and {cap}")
        return self

    @property
    def constrained_derived(self) -> bool:
        """True when ``constrained`` came from ``server`` (the file did not set it)."""
        return self._constrained_derived

    @model_validator(mode="after")
    def _batch_invariance_is_vllms(self) -> EndpointConfig:
        if self.batch_invariant and self.server != "vllm":
            raise ValueError(f"endpoint {self.name!r} sets batch_invariant, which only a vLLM server offers "
                             "(VLLM_BATCH_INVARIANT=1): remove it, or set server: vllm for a vLLM server")
        return self

    @model_validator(mode="after")
    def _replicas_are_remote(self) -> EndpointConfig:
        if self.replicas and self.embedded:
            raise ValueError("replicas need a remote base_url: the embedded server is one process "
                             "(raise embedded_parallel for more slots)")
        for url in self.replicas:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"replica {url!r} is not an http(s) URL such as http://10.0.0.2:8000/v1")
        if len(set(self.base_urls())) != len(self.base_urls()):
            raise ValueError("replicas repeat a base URL: list each server once")
        return self

    def base_urls(self) -> list[str]:
        """Every server of this endpoint: ``base_url`` first, then the replicas."""
        return [self.base_url, *self.replicas]

    @field_validator("extra_body")
    @classmethod
    def _no_reserved_fields(cls, body: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(_RESERVED_BODY & body.keys())
        if clash:
            raise ValueError(f"extra_body may not set {clash}: the project sets them itself")
        return body

    @property
    def embedded(self) -> bool:
        return self.base_url == EMBEDDED

    def key_source(self) -> str | None:
        """The environment variable the API key is read from, or None for a server without keys."""
        if self.api_key_env is not None:
            return self.api_key_env
        if not self.embedded and os.environ.get("OPENAI_API_KEY"):
            return "OPENAI_API_KEY"
        return None

    def api_key(self) -> str:
        """The key from the named environment variable; local servers need none."""
        source = self.key_source()
        if source is None:
            return "not-needed"
        key = os.environ.get(source)
        if not key:
            raise EndpointConfigError(
                f"endpoint {self.name!r} reads its API key from ${source}, which is not set: "
                f"export {source}=... or set api_key_env: null for a server without keys"
            )
        return key

    def sampling(self) -> dict[str, Any]:
        """The sampling parameters this endpoint sends: only those the file sets."""
        fields = {"temperature": self.temperature, "top_p": self.top_p, "frequency_penalty": self.frequency_penalty}
        return {k: v for k, v in fields.items() if v is not None}


class RulesMeta(BaseModel):
    """The meta that is no model: the deterministic rules reviser (``meta/rules_reviser.py``), the structure
    loop's baseline. An endpoints file names it ``meta: {kind: rules}``; ``--meta rules`` (and the Dagster
    endpoints resource's ``meta``) puts it in place of the file's meta role. It has no server, key or
    sampling, so none of an endpoint's fields, and a session gives it no client (``Clients.rules_meta``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["rules"]

    def facts(self) -> dict:
        """What records say of it, in place of an endpoint's facts."""
        return {"kind": self.kind, "model": RULES}


def _meta_kind(value: Any) -> str:
    """``rules`` for the rules meta (a ``kind: rules`` entry or a ``RulesMeta``), else ``llm``: an endpoint."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return RULES if kind == RULES else "llm"


Meta = Annotated[Annotated[EndpointConfig, Tag("llm")] | Annotated[RulesMeta, Tag(RULES)], Discriminator(_meta_kind)]
"""The meta role: an LLM endpoint, or the rules meta (``RulesMeta``)."""


class EndpointsConfig(BaseModel):
    """The three roles. ``memory`` defaults to the game endpoint (one-model mode). ``embed`` is the
    embeddings endpoint of the ``rag`` baseline (``/v1/embeddings``); unset, the embedded server
    serves them from its own model. ``actor: rules`` puts the rule actor (``llm/rule_actor.py``) in
    the game role of the two-model agent: the ``memory`` endpoint (else the ``game`` one) does the
    memory operations and the rules choose the actions."""

    model_config = ConfigDict(extra="forbid")

    game: EndpointConfig
    actor: Literal["model", "rules"] = Field("model", description="model: the game endpoint acts; rules: the rule "
                                             "actor acts on what memory shows, the model plays memory")
    memory: EndpointConfig | None = None
    meta: Meta | None = None
    embed: EndpointConfig | None = None
    embedded_parallel: int = Field(2, ge=1, le=16)
    embedded_ctx_per_slot: int = Field(4096, ge=512)

    @model_validator(mode="after")
    def _tools_on_meta_only(self) -> EndpointsConfig:
        for role in ("game", "memory"):
            endpoint = getattr(self, role)
            if endpoint is not None and endpoint.meta_mode != "one_call":
                raise ValueError(f"{role}.meta_mode is {endpoint.meta_mode!r}: meta_mode applies to the meta role only; "
                                 "move it to the `meta:` entry")
        return self

    @property
    def two_model(self) -> bool:
        return self.actor == RULES or (self.memory is not None and self.memory != self.game)

    def roles(self) -> dict[str, EndpointConfig]:
        """The configured endpoints by role, in the order game, memory, meta; the rules meta is none."""
        return {r: getattr(self, r) for r in ENDPOINT_ROLES if isinstance(getattr(self, r), EndpointConfig)}

    @property
    def rules_meta(self) -> RulesMeta | None:
        """The rules meta when it is this config's meta."""
        return self.meta if isinstance(self.meta, RulesMeta) else None

    def uses_embedded(self) -> bool:
        return any(e.embedded for e in self.roles().values())

    @model_validator(mode="after")
    def _embed_is_one_server(self) -> EndpointsConfig:
        if self.embed is not None and self.embed.replicas:
            raise ValueError("embed: an embeddings endpoint is one server (embedded or a URL), without replicas")
        return self

    def embed_endpoint(self) -> EndpointConfig:
        """The ``embed`` role, or the embedded server's embeddings when the file names none."""
        return self.embed or EndpointConfig(name="embed", base_url=EMBEDDED)


class EndpointConfigError(ValueError):
    """A config file or environment that cannot describe a usable endpoint."""


def load_endpoints(path: Path) -> EndpointsConfig:
    """Read an endpoints YAML file; errors name the file and the offending field."""
    return load_yaml_model(path, EndpointsConfig, "endpoints file", EndpointConfigError,
                           "pass --endpoints with a valid file")


def endpoints_with_meta(path: Path, meta: str = "endpoints") -> EndpointsConfig:
    """The endpoints file, with its meta role replaced by the rules meta (``RulesMeta``) when ``meta`` is ``rules``
    (the CLI's ``--meta`` and the Dagster endpoints resource's ``meta``)."""
    config = load_endpoints(path)
    if meta == "endpoints":
        return config
    if meta != RULES:
        raise EndpointConfigError(f"meta {meta!r}: give endpoints (the file's meta role) or rules (the rules meta)")
    return config.model_copy(update={"meta": RulesMeta(kind=RULES)})
