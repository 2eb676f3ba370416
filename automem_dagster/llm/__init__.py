"""OpenAI-compatible endpoints: configuration, the async client, and the embedded local server."""

from automem_dagster.llm.client import Completion, EndpointError, LLMClient
from automem_dagster.llm.config import (
    EMBEDDED,
    EndpointConfig,
    EndpointConfigError,
    EndpointsConfig,
    load_endpoints,
)
from automem_dagster.llm.embedded_server import embedded_model_path, embedded_server
from automem_dagster.llm.process import ServerProcess

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
