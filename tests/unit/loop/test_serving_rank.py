"""The specialist on a vLLM server: runtime LoRA loading, verified, and memory turns sent with it.

No vLLM runs here, so the server is ``standins/scripted_vllm.py``, a stand-in written from vLLM's
source: ``vllm/entrypoints/serve/lora/api_router.py`` (the load/unload routes exist
only under ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, else FastAPI's 404
``{"detail":"Not Found"}``; a load answers 200 with ``Success: LoRA adapter '<name>' added
successfully.``) and ``vllm/entrypoints/openai/models/serving.py`` (errors as
``{"error": {"message", "type", "param", "code"}}``: 400 InvalidUserInput for missing fields or a
name already loaded, 404 NotFoundError for a missing path or an unknown adapter, 400 BadRequestError for an
engine failure such as ``LoRA rank 64 is greater than max_lora_rank 16.``; ``/v1/models`` lists
adapters with ``root`` = path and ``parent`` = the base model; a chat request naming an unknown
model answers 404 ``The model `x` does not exist.``). It records the model each chat request
named, which is how these tests see which adapter played.

The adapter folders are peft folders as the trainer writes them, minus real weights: vLLM's
routes read the config's rank and the path; the content hash covers the weight bytes.
"""

from __future__ import annotations

import asyncio

import pytest
from lora_inputs import SETTINGS, STATS

from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.proficiency import lora_config_stage
from automem_dagster.loop.settings import ProficiencySettings, RoundSettings


def test_given_settings_above_the_rank_limit_are_refused_before_training(tmp_path):
    from automem_dagster.meta.curate import CurationResult
    from automem_dagster.training.settings import LoraSettings

    given = LoraSettings(**{**SETTINGS, "rank": 64, "alpha": 128})
    settings = ProficiencySettings(RoundSettings("crafter"), lora=given)
    data = CurationResult(str(tmp_path), 400, STATS)
    with pytest.raises(RoundError, match=r"LoRA rank 64 \(given, .*\) exceeds the serving vLLM's --max-lora-rank 16"):
        asyncio.run(lora_config_stage(data, settings, None, max_rank=16))
    assert asyncio.run(lora_config_stage(data, settings, None, max_rank=64)).settings.rank == 64
