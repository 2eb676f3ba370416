"""The endpoints on the embedded server (the session's llama.cpp): the shipped settings pass the check, and
JSON-schema mode works end to end, in a rollout and in a whole structure round."""

import asyncio
import json
import shutil

import pytest
from builders import on_embedded, shipped_on_embedded, structure_round

from automem_dagster.cli import main
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.llm.session import connect
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import Storage
from automem_dagster.options import Budget
from automem_dagster.paths import DEFAULT_ENDPOINTS, SCAFFOLDS


@pytest.mark.integration
def test_check_passes_on_the_shipped_embedded_settings(tmp_path, capsys, embedded):
    """The shipped embedded file's roles, served by the session's embedded model."""
    code = main(["endpoints", "check", "--endpoints", str(shipped_on_embedded(tmp_path / "endpoints.yaml", embedded))])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("mode honoured") == 2


def _json_mode(config: EndpointsConfig) -> EndpointsConfig:
    return config.model_copy(update={r: c.model_copy(update={"constrained": "json_schema"})
                                     for r, c in config.roles().items()})


@pytest.mark.integration
def test_a_crafter_rollout_in_json_schema_mode_has_only_valid_actions(tmp_path, embedded):
    """The embedded server (llama.cpp) takes the strict turn schemas: 1 episode x 8 steps. Under a
    JSON grammar llama.cpp decodes the 135M model at a few tokens per second, so the scaffold's LOG
    and PLAN budgets are cut to keep the test short; the turn forms are the same."""
    from automem_dagster.rollout import RolloutSpec, run_batch
    from automem_dagster.scaffold import load_scaffold

    config = on_embedded(_json_mode(EndpointsConfig.model_validate({"game": {"name": "game", "temperature": 0.7,
                                                                             "max_tokens": 300}})), embedded)
    v0 = load_scaffold("crafter", 0)
    short = v0.model_copy(update={"limits": v0.limits.model_copy(update={"log_max_ops": 2, "plan_max_ops": 1,
                                                                          "text_max_chars": 32})})
    spec = RolloutSpec("crafter", short, [42], 8, tmp_path / "batch")

    async def go():
        async with connect(config, tmp_path / "logs") as clients:
            return await run_batch(spec, clients)

    summary = asyncio.run(go())
    assert len(summary.episodes) == 1 and all(e.valid_action_rate == 1.0 for e in summary.episodes)
    assert summary.behaviour.malformed_turn_rate == 0.0


@pytest.mark.integration
def test_a_structure_round_with_json_schema_meta_calls_completes(tmp_path, embedded):
    """The shipped settings with the meta role in JSON-schema mode: the diagnosis and the revision go
    through llama.cpp's schema-to-grammar decoding, and the round ends with a decision or a recorded
    rejection. One meta attempt each (``--attempts 1``): under the schema grammar the 135M model decodes
    a revision at 4 to 30 tokens/s, and the two retries of a rejected one took 25 to 195 s each; a retry
    after a rejection is tests/contract/test_cli_rounds.py's. The diagnosis's schema bounds its reply
    under the shipped 1,000 max_tokens, so its one attempt is not cut off."""
    from automem_dagster.llm.config import load_endpoints

    scaffolds = tmp_path / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    storage = Storage(runs=tmp_path / "runs", scaffolds=scaffolds, lineage=tmp_path / "lineage")
    shipped = on_embedded(load_endpoints(DEFAULT_ENDPOINTS), embedded)
    config = shipped.model_copy(update={"meta": shipped.meta.model_copy(update={"constrained": "json_schema"})})
    settings = StructureConfig(budget=Budget(rollout_episodes=1, rollout_max_steps=4, eval_max_steps=4, eval_episodes=1,
                                             max_attempts=1)).for_game("crafter")

    result, _ = structure_round(storage, config, settings)
    assert result.revision is not None and (result.candidate is None or result.decision is not None)
    diagnosis = json.loads(next((tmp_path / "runs" / "diagnoses").rglob("diagnosis.json")).read_text())
    assert diagnosis["findings"]
