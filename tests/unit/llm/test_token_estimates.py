"""A hosted API's tokens are estimated (chars/4) without asking the server (``llm/tokens.py``)."""

from __future__ import annotations

from map_batches import MAP

from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.tokens import TokenCounter, estimate_tokens


def test_a_hosted_api_is_estimated_without_asking():
    counter = TokenCounter(EndpointConfig(name="meta", base_url="https://api.openai.com/v1"))
    assert counter.count(MAP) == estimate_tokens(MAP) and counter.requests == 0
    assert "has no tokenize route" in counter.note
