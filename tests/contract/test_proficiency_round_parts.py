"""The proficiency loop's small parts: LoRA settings bounds, the meta-LLM recommendation, the
specialist registry, the two-model endpoints and the training seeds (no model, no training)."""

from __future__ import annotations

import asyncio
import json

from builders import scripted_client
from lora_inputs import GOOD, STATS

from automem_dagster.meta.lora_config import recommend_lora
from automem_dagster.training.settings import LoraSettings, default_settings

BASE = {"name": "SmolLM2-135M-Instruct", "hidden_size": 576, "layers": 30, "parameters": 134_000_000, "context": 8192}


def _recommend(server, max_attempts=3):
    async def go():
        client = scripted_client(server)
        try:
            return await recommend_lora(STATS, BASE, default_settings(576), client, max_attempts)
        finally:
            await client.close()
    return asyncio.run(go())


def test_meta_recommendation_out_of_bounds_is_asked_again(scripted):
    bad = json.dumps({"reasoning": "a big dataset deserves a big rank", "settings": {**GOOD, "rank": 4096}})
    good = json.dumps({"reasoning": "400 examples: moderate rank, two epochs", "settings": GOOD})
    server = scripted([{"match": "That reply was rejected", "reply": good}, {"match": "LoRA", "reply": bad}])
    choice = _recommend(server)
    assert choice.source == "meta-LLM" and choice.settings == LoraSettings(**GOOD)
    assert len(choice.attempts) == 2 and "rank" in choice.attempts[0].error
    assert choice.describe().startswith("LoRA configuration: recommended by the meta-LLM within bounds (400 examples")
    assert f"rank {GOOD['rank']}, alpha {GOOD['alpha']}" in choice.describe()


def test_no_usable_recommendation_falls_back_to_defaults_and_says_so(scripted, tmp_path):
    server = scripted([{"match": "LoRA", "reply": "rank 16 please"}])
    choice = _recommend(server, max_attempts=2)
    assert choice.source == "default" and choice.settings == default_settings(576)
    assert "no usable recommendation in 2 attempts" in choice.reasoning
    saved = json.loads(choice.save(tmp_path / "lora_config.json").read_text())
    assert saved["source"] == "default" and len(saved["attempts"]) == 2
    assert choice.describe().startswith("LoRA configuration: the AutoMem paper's defaults scaled to the base (no usable")
