"""Exact token counts from the endpoint's server, chars/4 only as the fallback, in the meta budget.

The embedded server (llama.cpp) is the real thing: its ``/apply-template`` + ``/tokenize`` count
must equal the ``prompt_tokens`` a chat request reports. vLLM's ``/tokenize`` is the scripted
stand-in's (``standins/scripted_vllm.py``: a word or one symbol per token, so a map of dots costs a
token per character, four times chars/4, as dense text does under real tokenizers), and a
server without the route is the plain scripted server, which answers 404 to unknown routes.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from map_batches import MESSAGES, map_batch

from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.tokens import TokenCounter, estimate_tokens
from automem_dagster.meta.compress import render_for_diagnosis
from automem_dagster.meta.diagnose import diagnose
from automem_dagster.meta.evidence import collect_evidence
from automem_dagster.scaffold import load_scaffold

FINDING = json.dumps({"summary": "It idled for the whole episode.", "findings": [
    {"episode": "crafter__seed7", "step": 3, "kind": "stuck", "what_happened": "noop", "scaffold_cause": "no warning",
     "proposed_change": "enable the stuck signal"}]})


@pytest.mark.parametrize("server", ["llama.cpp", "vllm"])
def test_a_server_without_the_route_falls_back_to_chars_per_4_and_says_why(scripted, server):
    host = scripted([])
    counter = TokenCounter(EndpointConfig(name="meta", base_url=host.base_url, server=server), host.base_url)
    assert counter.exact
    assert counter.count("x" * 40) == 10 and counter.count_messages(MESSAGES) == sum(
        estimate_tokens(m["content"]) for m in MESSAGES)
    assert not counter.exact and counter.method == "chars/4" and counter.requests == 1
    assert "(/tokenize at its root) answered HTTP 404" in counter.note and "set `server:`" in counter.note


@pytest.fixture
def vllm_meta(vllm_server):
    return vllm_server([{"match": "Diagnose this batch", "reply": FINDING}], base_model="meta-model", max_model_len=4096)


def chat_requests(server) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/scripted/requests") as resp:
        return json.loads(resp.read())["requests"]


def test_the_diagnosis_fits_vllms_context_in_one_request_by_exact_count(vllm_meta, tmp_path):
    """chars/4 takes 14 steps of maps (about 1,300 estimated tokens, 3,229 by the server) to fit
    half the room and sends a prompt over max_model_len, which only the refusal shrinks; counted
    by the server, the first request fits."""
    batch = tmp_path / "batch"
    map_batch(batch / "trajectories", steps=14, maps=3)
    config = EndpointConfig(name="meta", base_url=vllm_meta.base_url, model="meta-model", server="vllm",
                            constrained="none", context_tokens=4096, max_tokens=300)

    async def run():
        client = LLMClient(config, config.base_url)
        try:
            return await diagnose(batch, load_scaffold("crafter", 0), client, tmp_path / "out")
        finally:
            await client.close()

    result = asyncio.run(run())
    requests = chat_requests(vllm_meta)
    assert len(requests) == 1 and requests[0]["prompt_tokens"] + 300 <= 4096
    assert "needs 3229 tokens (exact, vllm /tokenize), over the budget" in result.compression_notes[0]
    assert len(result.attempts) == 1 and result.findings[0]["step"] == 3


def test_compression_counts_on_the_server_a_few_times_not_per_probe(vllm_meta, tmp_path):
    paths = map_batch(tmp_path / "batch", steps=120)
    evidence = collect_evidence(paths)
    config = EndpointConfig(name="meta", base_url=vllm_meta.base_url, model="meta-model", server="vllm")
    calibrated = TokenCounter(config)
    rendered = render_for_diagnosis(paths, evidence, 1500, counter=calibrated)
    assert rendered.compressed and rendered.tokens == TokenCounter(config).count(rendered.text) <= 1500
    assert calibrated.requests <= 4


def test_the_token_counts_benchmark_counts_on_a_vllm_tokenize_route(vllm_meta, tmp_path, capsys):
    from test_benchmarks import _run

    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(
        f"game: {{name: game, base_url: '{vllm_meta.base_url}', server: vllm, model: meta-model}}\n"
        f"meta: {{name: meta, base_url: '{vllm_meta.base_url}', server: vllm, model: meta-model, context_tokens: 4096, "
        "max_tokens: 300}\n")
    result = _run("token_counts", tmp_path, capsys, "--endpoints", str(endpoints))
    f = result["results"]
    assert f["counter"] == "exact, vllm /tokenize" and f["note"] is None
    assert f["full_batch"]["exact"] > f["full_batch"]["chars4"] and f["budget"]["exact"] > f["budget"]["chars4"]
    assert len(f["searches"]) == 3 and result["verdict"] == "PASS", json.dumps([result["targets"], f["searches"]])
