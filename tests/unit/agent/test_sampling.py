"""What each kind of server does with a request's sampling seed, as ``seed_support`` states it."""

import pytest

from automem_dagster.llm import EndpointConfig

LLAMA = "http://10.0.0.5:8080/v1"


@pytest.mark.parametrize(("fields", "says"), [
    ({"server": "llama.cpp", "base_url": LLAMA}, "cache_prompt: false makes reruns identical"),
    ({"server": "llama.cpp", "base_url": LLAMA, "cache_prompt": False}, "honoured: llama.cpp"),
    ({"base_url": "embedded"}, "identical at any concurrency"),
    ({"server": "vllm", "batch_invariant": True}, "declares the vLLM server batch-invariant"),
    ({"server": "vllm", "constrained": "vllm"}, "only on a vLLM started with VLLM_BATCH_INVARIANT=1"),
    ({"server": "vllm", "temperature": 0.0, "seed": 3}, "only on a vLLM started with VLLM_BATCH_INVARIANT=1"),
    ({"base_url": "https://api.anthropic.com/v1/", "temperature": 0.5}, "ignored: the provider accepts seed"),
    ({"server": "openai-compatible", "constrained": "json_schema"}, "best effort"),
    ({"server": "llama.cpp", "seed": 7}, "every request uses seed 7"),
    ({"server": "openai-compatible", "temperature": 0.0}, "greedily"),
])
def test_seed_support_states_what_each_server_does_with_seeds(fields, says):
    from automem_dagster.agent.sampling import seed_support

    assert says in seed_support(EndpointConfig(name="game", **fields))
