"""Exact token counts from the endpoint's server, chars/4 only as the fallback, in the meta budget.

The embedded server (llama.cpp) is the real thing: its ``/apply-template`` + ``/tokenize`` count
must equal the ``prompt_tokens`` a chat request reports. vLLM's ``/tokenize`` is the scripted
stand-in's (``standins/scripted_vllm.py``: a word or one symbol per token, so a map of dots costs a
token per character, four times chars/4, as dense text does under real tokenizers), and a
server without the route is the plain scripted server, which answers 404 to unknown routes.
"""

from __future__ import annotations

from map_batches import MAP

from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.tokens import TokenCounter, estimate_tokens


def test_a_hosted_api_is_estimated_without_asking():
    counter = TokenCounter(EndpointConfig(name="meta", base_url="https://api.openai.com/v1"))
    assert counter.count(MAP) == estimate_tokens(MAP) and counter.requests == 0
    assert "has no tokenize route" in counter.note
