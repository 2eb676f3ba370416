"""One seed-block rule (loop/seed_blocks.py): changing it changes the training seeds the CLI round, the
Dagster ``rollout_batch`` asset and the DVC ``rollout`` stage's command play, on real Crafter with a
scripted game model (and meta) that idles."""

import json

import dagster as dg
import pytest
from builders import endpoints_file, mlflow_resource, round_resources
from dvc_stages import StageProject

from automem_dagster import cli
from automem_dagster.commands import shared
from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.structure.assets import rollout_batch
from automem_dagster.loop import seed_blocks
from automem_dagster.rollout import episode_id
from automem_dagster.rollout.seeds import training_seeds
from automem_dagster.rollout.trajectory import read_manifest

EPISODES = 2
IDLE = [{"match": "Phase: LOG", "reply": "<|DONE|>"}, {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"}]
WORDING = json.dumps({"rationale": "Finding 1: say it more firmly.", "log_prompt": "Record what happened, briefly."})


def block(number: int) -> list[int]:
    return training_seeds("crafter", EPISODES, number * EPISODES)


def meta_rules(seed: int) -> list[dict]:
    """A diagnosis citing the first episode of the block, then a wording-only patch (rejected, so the
    round ends after its rollout: what it played is what this test reads)."""
    diagnosis = {"summary": "The agent idles.", "findings": [
        {"episode": episode_id("crafter", seed), "step": 1, "kind": "stuck", "what_happened": "noop again",
         "scaffold_cause": "nothing warns it", "proposed_change": "warn when stuck"}]}
    return [{"match": "Diagnose this batch", "reply": json.dumps(diagnosis)},
            {"match": "Propose one patch", "reply": WORDING}]


@pytest.fixture(params=[0, 7], ids=["the rule's block", "a changed rule's block"])
def rule(request, monkeypatch):
    """The rule as shipped (block 0 on an empty lineage) or changed to always name block 7."""
    if request.param:
        monkeypatch.setattr(seed_blocks, "seed_block", lambda registered, previous=None: request.param)
    return request.param


def test_the_cli_round_plays_the_rules_block(rule, tmp_path, storage, scripted, monkeypatch):
    store = storage.storage()
    monkeypatch.setattr(shared, "STORAGE", store)
    server = scripted(meta_rules(block(rule)[0]) + IDLE)
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", server)
    assert cli.main(["revise", "--game", "crafter", "--rollout-episodes", str(EPISODES), "--rollout-max-steps", "2",
                     "--eval-episodes", "2", "--eval-max-steps", "2", "--endpoints", str(endpoints),
                     "--no-tracking"]) == 0
    [batch] = (store.runs / "rollouts" / "crafter" / "v0").iterdir()
    assert read_manifest(batch)["seeds"] == block(rule)


def test_the_dagster_rollout_asset_plays_the_rules_block(rule, tmp_path, storage, scripted):
    server = scripted(IDLE)
    resources = round_resources(tmp_path, storage, server, mlflow_resource(tmp_path))
    result = dg.materialize([rollout_batch], partition_key="crafter", resources=resources,
                            run_config=dg.RunConfig(ops={"rollout_batch": RoundConfig(
                                budget={"rollout_episodes": EPISODES, "rollout_max_steps": 2})}))
    assert result.success
    assert read_manifest(result.output_for_node("rollout_batch"))["seeds"] == block(rule)


def test_the_dvc_rollout_stage_plays_the_rules_block(rule, tmp_path, scripted, monkeypatch):
    project = StageProject(tmp_path / "project")
    endpoints_file(project.root / "endpoints.yaml", scripted(IDLE), ("game",))
    project.set_params(endpoints="endpoints.yaml", rollout={"episodes": EPISODES, "max_steps": 2})
    command = project.command("rollout")
    assert command[:2] == ["automem", "rollout"] and command[command.index("--round") + 1] == "structure"
    monkeypatch.chdir(project.root)
    monkeypatch.setattr(shared, "STORAGE", project.storage)
    assert cli.main(command[1:]) == 0
    assert read_manifest(project.root / "outputs" / "rollout")["seeds"] == block(rule)


@pytest.mark.contract
def test_params_yaml_can_name_the_block_of_the_dvc_stage(tmp_path):
    """``rollout.seed_block`` empty (the shipped value) leaves the block to the rule; a number names one."""
    project = StageProject(tmp_path / "project")
    assert project.command("rollout")[project.command("rollout").index("--seed-block") + 1] == ""
    project.set_params(rollout={"seed_block": 3})
    assert project.command("rollout")[project.command("rollout").index("--seed-block") + 1] == "3"
