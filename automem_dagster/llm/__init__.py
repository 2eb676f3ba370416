"""OpenAI-compatible endpoints: configuration, the async client, and the embedded local server.

The client's names (``LLMClient``, ``Completion``, ``EndpointError``) are imported on first use
(PEP 562), not with the package: the trainer locates the packaged GGUF through this package and must
not pull in the model clients (openai, aiohttp), which the ``train`` extra does not install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automem_dagster.llm.config import (
    EMBEDDED,
    EndpointConfig,
    EndpointConfigError,
    EndpointsConfig,
    load_endpoints,
)
from automem_dagster.llm.embedded_server import embedded_model_path, embedded_server
from automem_dagster.llm.process import ServerProcess

if TYPE_CHECKING:
    from automem_dagster.llm.client import Completion, EndpointError, LLMClient

_CLIENT_NAMES = ("Completion", "EndpointError", "LLMClient")

__all__ = [
    "EMBEDDED",
    "Completion",
    "EndpointConfig",
    "EndpointConfigError",
    "EndpointError",
    "EndpointsConfig",
    "LLMClient",
    "ServerProcess",
    "embedded_model_path",
    "embedded_server",
    "load_endpoints",
]


def __getattr__(name: str):
    if name not in _CLIENT_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from automem_dagster.llm import client

    value = getattr(client, name)
    globals()[name] = value
    return value
