"""Every lane's connection pool verifies TLS with the process's one context: building a context
loads the CA bundle (about 30 ms of CPU), which a pool per lane paid again for every episode
played at once (``benchmarks/rollout_scaling.py``). A pool's failures are named as httpx names them
(a server that hangs up or answers too late: ``tests/contract/test_retries.py``)."""

import asyncio
import ssl

from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.attempts import CountingHttpClient, shared_ssl_context
from automem_dagster.llm.client import LLMClient


def tls_context(pool) -> ssl.SSLContext:
    """The context the openai client's aiohttp transport hands its connections."""
    return pool._client._transport.ssl_context


def test_every_pool_of_every_client_verifies_with_the_one_tls_context():
    async def contexts() -> list[ssl.SSLContext]:
        clients = [LLMClient(EndpointConfig(name=role, base_url="https://api.example.invalid/v1", model="m"),
                             "https://api.example.invalid/v1") for role in ("game", "memory")]
        try:
            return [tls_context(client._client(lane)) for client in clients for lane in (None, 0, 1, 2)]
        finally:
            for client in clients:
                await client.close()

    found = asyncio.run(contexts())
    assert len(found) == 8 and all(c is shared_ssl_context() for c in found)
    assert shared_ssl_context().verify_mode == ssl.CERT_REQUIRED and shared_ssl_context().check_hostname


def test_a_client_given_its_own_context_keeps_it():
    own = ssl.create_default_context()

    async def context() -> ssl.SSLContext:
        client = CountingHttpClient(verify=own)
        try:
            return client._transport.ssl_context
        finally:
            await client.aclose()

    assert asyncio.run(context()) is own
