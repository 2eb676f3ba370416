"""A refused connection through an endpoint's pool counts as a connection failure, not a timeout
(the pools' one TLS context: tests/unit/llm/test_attempts.py)."""

import asyncio
import socket

import pytest

from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.client import EndpointError, LLMClient


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.contract
def test_a_refused_connection_counts_as_a_connection_failure_not_a_timeout():
    """openai's vendored aiohttp adapter names a refused connection ``ConnectTimeout``; the pool's client
    names it as httpx's own transport does, so the SDK raises ``APIConnectionError`` and the attempt
    counts as ``connection``."""
    base_url = f"http://127.0.0.1:{_free_port()}/v1"
    client = LLMClient(EndpointConfig(name="game", base_url=base_url, model="m", max_retries=1), base_url)

    async def call():
        try:
            return await client.complete([{"role": "user", "content": "hi"}])
        finally:
            await client.close()

    with pytest.raises(EndpointError) as err:
        asyncio.run(call())
    assert err.value.failures == {"connection": 2}
    assert "last: APIConnectionError" in str(err.value)
