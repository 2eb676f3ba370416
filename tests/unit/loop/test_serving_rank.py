"""LoRA settings above the serving vLLM's ``--max-lora-rank`` are refused before training."""

from __future__ import annotations

import asyncio

import pytest
from lora_inputs import SETTINGS, STATS

from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.proficiency import lora_config_stage
from automem_dagster.loop.settings import ProficiencyConfig, Training


def test_given_settings_above_the_rank_limit_are_refused_before_training(tmp_path):
    from automem_dagster.meta.curate import CurationResult
    from automem_dagster.training.settings import LoraSettings

    given = LoraSettings(**{**SETTINGS, "rank": 64, "alpha": 128})
    settings = ProficiencyConfig(training=Training(lora_settings=given.model_dump_json())).for_game("crafter")
    data = CurationResult(str(tmp_path), 400, STATS)
    with pytest.raises(RoundError, match=r"LoRA rank 64 \(given, .*\) exceeds the serving vLLM's --max-lora-rank 16"):
        asyncio.run(lora_config_stage(data, settings, None, max_rank=16))
    assert asyncio.run(lora_config_stage(data, settings, None, max_rank=64)).settings.rank == 64
