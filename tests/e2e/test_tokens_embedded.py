"""Exact token counts from the embedded server (llama.cpp's ``/apply-template`` + ``/tokenize``) equal
the ``prompt_tokens`` a chat request reports, and the meta budget fits its context by that count."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from map_batches import MAP, MESSAGES, map_batch

from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.tokens import TokenCounter, estimate_tokens
from automem_dagster.meta.compress import render_for_diagnosis
from automem_dagster.meta.diagnose import fit_messages, input_budget
from automem_dagster.meta.diagnosis_record import SYSTEM_PROMPT
from automem_dagster.meta.evidence import collect_evidence
from automem_dagster.scaffold import load_scaffold


def head_and_ask(scaffold) -> tuple[str, str]:
    """A short fixed prompt around the batch (``diagnose``'s own, ``prompt_parts``, carries the whole
    scaffold and would leave a 4096-token context little room to show the difference)."""
    return f"Game: crafter. Scaffold version {scaffold.version}.\n\nTrajectories:\n", "\n\nDiagnose this batch."




@pytest.mark.integration
def test_exact_counts_equal_the_embedded_servers_own(embedded):
    config = EndpointConfig(name="meta", max_tokens=1)
    counter = TokenCounter(config, embedded.base_url)
    assert counter.exact and counter.method == "exact, llama.cpp /tokenize"

    async def prompt_tokens():
        client = LLMClient(config, embedded.base_url)
        try:
            return (await client.complete(MESSAGES)).input_tokens
        finally:
            await client.close()

    assert counter.count_messages(MESSAGES) == asyncio.run(prompt_tokens())
    request = urllib.request.Request(f"http://127.0.0.1:{embedded.port}/tokenize", data=json.dumps({"content": MAP}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as resp:
        assert counter.count(MAP) == len(json.loads(resp.read())["tokens"])
    assert counter.count(MAP) > 1.5 * estimate_tokens(MAP)   # a map is far denser than chars/4
    assert counter.note is None


@pytest.mark.integration
def test_the_meta_budget_fits_the_embedded_context_by_the_servers_count(embedded, tmp_path):
    """44 steps of maps for a 4096-token context: chars/4 undercounts them and, kept safe only by
    halving the room, summarises most of the 44 steps; counted by the server, all 44 go verbatim
    and the whole request still fits."""
    paths = map_batch(tmp_path / "batch", steps=44)
    evidence = collect_evidence(paths)
    config = EndpointConfig(name="meta", context_tokens=4096, max_tokens=300)
    counter = TokenCounter(config, embedded.base_url)
    head, ask = head_and_ask(load_scaffold("crafter", 0))

    estimated = render_for_diagnosis(paths, evidence, input_budget(config, TokenCounter.estimate(), head + ask))
    assert estimated.compressed and counter.count(estimated.text) > 1.3 * estimated.tokens

    budget = input_budget(config, counter, head + ask)
    rendered = fit_messages(paths, evidence, budget, counter, config, head, ask)
    assert not rendered.compressed and rendered.tokens == counter.count(rendered.text) <= budget
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": head + rendered.text + ask}]
    # The request's prompt_tokens equal count_messages (the test above); sending ~3,400 tokens costs
    # a minute of a shared CPU, so the request is counted, not sent.
    assert 3000 < counter.count_messages(messages) <= 4096 - 300

    tight = fit_messages(paths, evidence, 1500, counter, config, head, ask)
    assert tight.compressed and tight.tokens <= 1500 and "(exact, llama.cpp /tokenize)" in tight.notes[0]
