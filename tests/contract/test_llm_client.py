"""Endpoints: config validation, retries and clear errors against real local servers, no key leaks."""

import asyncio

import pytest
from completions import _complete

from automem_dagster.llm import (
    EndpointConfig,
    EndpointError,
    LLMClient,
)
from automem_dagster.llm.process import free_port


def test_scripted_reply_accounting_and_lora_body(scripted):
    server = scripted([{"match": "hi", "reply": "<|DONE|>"}])
    cfg = EndpointConfig(name="memory", base_url="unused", server="llama.cpp", constrained="none", lora_id=0)
    comp = _complete(LLMClient(cfg, server.base_url))
    assert comp.text == "<|DONE|>" and comp.attempts == 1
    assert comp.input_tokens >= 0 and comp.output_tokens == len("<|DONE|>") // 4 and comp.latency_s > 0


def test_transient_errors_are_retried_then_reported(scripted, monkeypatch):
    monkeypatch.setenv("AUTOMEM_SECRET", "sk-very-secret-value")
    server = scripted([{"match": "", "status": 503}])
    cfg = EndpointConfig(name="game", base_url="unused", max_retries=2, api_key_env="AUTOMEM_SECRET")
    with pytest.raises(EndpointError, match=r"'game' \(.*\) failed after 3 attempts") as err:
        _complete(LLMClient(cfg, server.base_url))
    assert "sk-very-secret-value" not in str(err.value)


@pytest.mark.contract
def test_connection_refused_is_a_clear_error():
    cfg = EndpointConfig(name="game", base_url="unused", max_retries=1, timeout_s=2)
    with pytest.raises(EndpointError, match="check that the server is running"):
        _complete(LLMClient(cfg, f"http://127.0.0.1:{free_port()}/v1"))


def test_client_errors_are_not_retried(scripted):
    server = scripted([{"match": "", "status": 400}])
    cfg = EndpointConfig(name="game", base_url="unused", max_retries=3)
    with pytest.raises(EndpointError, match="HTTP 400"):
        _complete(LLMClient(cfg, server.base_url))


def test_an_episode_lane_pins_its_calls_to_one_llama_cpp_slot(scripted):
    """llama.cpp's server takes ``id_slot`` in the request body (tools/server/README.md): lane 3 of a
    2-slot server goes to slot 1; without known slots, or on another server kind, nothing is pinned."""
    import json

    server = scripted([{"match": "", "reply": "ok"}])

    async def go():
        for cfg, slots in ((EndpointConfig(name="g", base_url="x", server="llama.cpp"), 2),
                           (EndpointConfig(name="g", base_url="x", server="llama.cpp"), None),
                           (EndpointConfig(name="g", base_url="x", server="vllm"), 2)):
            client = LLMClient(cfg, server.base_url, slots=slots)
            await client.complete([{"role": "user", "content": "hi"}], lane=3)
            await client.close()

    asyncio.run(go())
    bodies = [json.loads(line)["body"] for line in server.request_log.read_text().splitlines()]
    assert [b.get("id_slot") for b in bodies] == [1, None, None]
