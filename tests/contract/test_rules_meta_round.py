"""A whole structure round with the rules meta (no model) and a scripted game model, through the lineage, the
gate and MLflow (the rules themselves: tests/unit/meta/test_rules_reviser.py)."""

import json
import shutil

import pytest
from builders import structure_round

from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.config import EndpointsConfig, RulesMeta
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.structure import Storage
from automem_dagster.options import Budget
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.tracking import Tracker

GAME_RULES = [{"match": "Phase: LOG", "reply": "<|DONE|>"}, {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"}]


@pytest.fixture
def storage(tmp_path):
    scaffolds = tmp_path / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    return Storage(runs=tmp_path / "runs", scaffolds=scaffolds, lineage=tmp_path / "lineage")


def test_a_round_with_the_rules_meta_goes_through_lineage_gate_and_mlflow(storage, scripted, tmp_path):
    server = scripted(GAME_RULES)
    game = EndpointConfig(name="game", base_url=server.base_url, model="scripted", constrained="none")
    config = EndpointsConfig(game=game, meta=RulesMeta(kind="rules"))
    settings = StructureConfig(budget=Budget(rollout_episodes=2, rollout_max_steps=5, eval_max_steps=5,
                                              eval_episodes=2)).for_game("crafter")

    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", artifact_root=tmp_path / "artifacts")
    result, _ = structure_round(storage, config, settings, tracker)
    # The scripted model idles: the rules see stuck stretches and files nobody used.
    diagnosis = json.loads((result.diagnosis_dir / "diagnosis.json").read_text())
    assert {f["kind"] for f in diagnosis["findings"]} >= {"stuck", "other"} and not diagnosis["attempts"]
    assert "rules meta" in (result.diagnosis_dir / "diagnosis.md").read_text()
    assert result.revision.meta == "rules" and "signals: stuck.enabled False -> True" in result.revision.changes
    # Both versions idle alike: on 2 seeds the default gate cannot tell them apart (inconclusive), v0 stays.
    assert result.outcome == "inconclusive" and storage.load_lineage("crafter").champion().version == 0
    assert server.request_log.read_text().count('"messages"') > 0
    runs = {r["role"]: r for r in tracker.runs_for("crafter")}
    assert runs["candidate"]["meta"] == "rules" and runs["champion"]["meta"] is None
    params = tracker.client.get_run(runs["candidate"]["run_id"]).data.params
    assert params["endpoint.meta.kind"] == "rules" and params["endpoint.meta.model"] == "rules"

