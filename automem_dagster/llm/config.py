"""Named LLM endpoints as configuration.

Every model AutoMem-Dagster talks to (the game model, the memory specialist, the meta-LLM)
is an OpenAI-compatible endpoint described here, so moving from the embedded local model to
vLLM or a hosted API is an edit to a YAML file, never to code. API keys are referenced by the
name of an environment variable and are never stored in the config.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from automem_dagster.datafiles import load_yaml_model

EMBEDDED = "embedded"
"""A ``base_url`` of this value means: the local server the project starts itself."""

ENDPOINT_ROLES = ("game", "memory", "meta")


class EndpointConfig(BaseModel):
    """One OpenAI-compatible endpoint.

    ``constrained`` says which constrained-decoding dialect the server understands:
    ``gbnf`` (llama.cpp's ``grammar`` field), ``vllm`` (vLLM structured outputs with a
    grammar) or ``none`` (free text, parsed tolerantly). ``lora_id`` selects a LoRA adapter
    loaded in a llama.cpp server per request.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    base_url: str = EMBEDDED
    model: str = "smollm2-135m-instruct"
    api_key_env: str | None = None
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0, description="sent only when set")
    max_tokens: int = Field(160, ge=1, le=32_768)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    backoff_s: float = Field(0.5, ge=0)
    constrained: Literal["gbnf", "vllm", "none"] = "gbnf"
    context_tokens: int = Field(8192, ge=512, description="context window; long meta-LLM inputs are compressed to fit")
    lora_id: int | None = None
    seed: int | None = None
    cache_prompt: bool = Field(True, description="llama.cpp: reuse a cached prompt prefix (fast); false makes "
                                                 "seeded reruns bit-identical (llama.cpp's README)")

    def api_key(self) -> str:
        """The key from the named environment variable; local servers need none."""
        if self.api_key_env is None:
            return "not-needed"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise EndpointConfigError(
                f"endpoint {self.name!r} reads its API key from ${self.api_key_env}, which is not set: "
                f"export {self.api_key_env}=... or set api_key_env: null for a server without keys"
            )
        return key


class EndpointsConfig(BaseModel):
    """The three roles. ``memory`` defaults to the game endpoint (one-model mode)."""

    model_config = ConfigDict(extra="forbid")

    game: EndpointConfig
    memory: EndpointConfig | None = None
    meta: EndpointConfig | None = None
    embedded_parallel: int = Field(2, ge=1, le=16)
    embedded_ctx_per_slot: int = Field(4096, ge=512)

    @property
    def two_model(self) -> bool:
        return self.memory is not None and self.memory != self.game

    def uses_embedded(self) -> bool:
        return any(e is not None and e.base_url == EMBEDDED for e in (self.game, self.memory, self.meta))


class EndpointConfigError(ValueError):
    """A config file or environment that cannot describe a usable endpoint."""


def load_endpoints(path: Path) -> EndpointsConfig:
    """Read an endpoints YAML file; errors name the file and the offending field."""
    return load_yaml_model(path, EndpointsConfig, "endpoints file", EndpointConfigError,
                           "pass --endpoints with a valid file")
