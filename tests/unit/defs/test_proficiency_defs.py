"""The proficiency loop's Dagster definitions: the assets, check, jobs and sensor load as designed, and the
gate sensor requests one promotion per evaluated game."""

import json

import dagster as dg
import pytest
from proficiency_round_rules import LORA_REPLY, PROFICIENCY_ASSETS

from automem_dagster.defs import defs
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from automem_dagster.defs.proficiency.sensors import specialist_gate_sensor


def test_definitions_load_with_the_proficiency_assets_check_jobs_and_sensor():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == PROFICIENCY_ASSETS | {
        "scaffold_version", "rollout_batch", "diagnosis", "scaffold_candidate", "candidate_evaluation",
        "champion_scaffold"}
    assert dg.AssetCheckKey(dg.AssetKey("specialist_evaluation"), "specialist_gate") in graph.asset_check_keys
    for name in PROFICIENCY_ASSETS:
        expected = "evaluation" if name == "specialist_evaluation" else "proficiency"  # beside candidate_evaluation
        assert defs.resolve_assets_def(name).group_names_by_key[dg.AssetKey(name)] == expected
    # The proficiency round plays and trains on the champion scaffold: a new champion makes it stale.
    assert dg.AssetKey("champion_scaffold") in graph.get(dg.AssetKey("training_rollouts")).parent_keys
    sharded = {f"{asset}_{step}" for asset in ("training_rollouts", "specialist_evaluation")  # plan -> shards -> merge
               for step in ("plan", "shard", "merge")}
    assert {n.name for n in defs.resolve_job_def("proficiency_round_job").all_node_defs} == (
        PROFICIENCY_ASSETS - {"champion_specialist"}) | sharded | {"specialist_evaluation_specialist_gate"}
    assert {n.name for n in defs.resolve_job_def("promote_specialist_job").all_node_defs} == {"champion_specialist"}
    sensor = defs.resolve_sensor_def("specialist_gate_sensor")
    assert sensor.job_name == "promote_specialist_job" and sensor.default_status == dg.DefaultSensorStatus.RUNNING
    settings = ProficiencyConfig().for_game("crafter")
    curation = settings.curation_settings()
    assert curation.min_examples == 16 and curation.weights.horizon == 10
    budget = settings.budget
    assert (budget.rollout_episodes, budget.rollout_max_steps, settings.training.max_train_steps) == (2, 20, 20)
    assert ProficiencyConfig(curation={"min_examples": None}).for_game("nethack").curation_settings().min_examples == 800
    lora = ProficiencyConfig(training={"lora_settings": json.dumps(LORA_REPLY["settings"])}).training.lora
    assert lora is not None and lora.rank == 8
    with pytest.raises(ValueError, match="out of bounds"):
        ProficiencyConfig(training={"lora_settings": json.dumps({**LORA_REPLY["settings"], "rank": 1024})})


def test_gate_sensor_requests_one_promotion_per_evaluated_game(tmp_path):
    """Evaluations of several games between two ticks each get a promotion, and only once."""
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path))
    for game in ("crafter", "nethack"):
        instance.report_runless_asset_event(dg.AssetMaterialization(
            "specialist_evaluation", partition=game, metadata={"outcome": "evaluated", "adapter": "a1"}))
    first = specialist_gate_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert [r.partition_key for r in first.run_requests] == ["crafter", "nethack"]
    assert all(r.run_key.startswith("promote-specialist-") and r.tags["automem/adapter"] == "a1"
               for r in first.run_requests)
    again = specialist_gate_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=first.cursor,
                                                                         definitions=defs))
    assert again.run_requests == [] and again.cursor == first.cursor
