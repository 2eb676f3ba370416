"""Whole structure rounds materialized in process on real Crafter, every model one scripted server
(``dagster_round_rules``): a winning revision is promoted, a rejected one finishes the graph and keeps the
champion, a round failed in evaluation is resumed by the next; loading the definitions warns of nothing.
Storage, lineage and the MLflow store live in tmp_path."""

import json
import subprocess
import sys

import dagster as dg
import pytest
from builders import metadata, mlflow_resource, round_resources, run_id_of, whole
from dagster_round_rules import GAME_RULES, ROUND, RUN_CONFIG, meta_rules, winning_patch

from automem_dagster.defs import defs
from automem_dagster.defs.proficiency.sensors import new_champion_sensor
from automem_dagster.defs.resources import MlflowResource
from automem_dagster.defs.structure.assets import (
    champion_scaffold,
    scaffold_version,
)
from automem_dagster.defs.structure.sensors import evaluation_gate_sensor, next_round_sensor
from automem_dagster.scaffold import content_hash, load_scaffold


@pytest.mark.contract
def test_loading_the_definitions_prints_no_preview_or_beta_warning():
    """What ``make dagster`` loads: Dagster's preview warning for partitioned checks is silenced where
    the checks are defined, and nothing else of Dagster's warns."""
    code = "import warnings; warnings.simplefilter('error', Warning); import automem_dagster.defs"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]

@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory) -> MlflowResource:
    """One tracking store for the module: creating an MLflow sqlite schema takes seconds."""
    return mlflow_resource(tmp_path_factory.mktemp("mlflow"))

@pytest.fixture
def resources(tmp_path, storage, mlflow_store):
    """Factory: the resources of a round whose every endpoint is ``server``."""

    return lambda server: round_resources(tmp_path, storage, server, mlflow_store)

def test_a_winning_round_promotes_the_candidate(tmp_path, storage, scripted, resources, mlflow_store):
    server = scripted(meta_rules(storage, [winning_patch()]) + GAME_RULES)
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))
    res = resources(server)
    result = dg.materialize(ROUND, partition_key="crafter", resources=res, instance=instance, run_config=RUN_CONFIG)

    assert result.success
    assert metadata(result, "rollout_batch")["episodes"] == 2
    assert "**v0**: calls:" in whole(metadata(result, "rollout_batch"), "retries")           # calls, attempts, retries, time lost
    assert metadata(result, "diagnosis")["findings"] == 1
    candidate = metadata(result, "scaffold_candidate")
    assert candidate["outcome"] == "accepted" and "stuck.enabled False -> True" in candidate["diff_full"]
    evaluation = metadata(result, "candidate_evaluation")
    assert evaluation["candidate_mean"] > evaluation["champion_mean"] == 0.0
    assert "data:image/png;base64," in evaluation["behaviour_plot"] and "± " in whole(evaluation, "progression")
    assert "**candidate v1**: calls:" in whole(evaluation, "retries") and "**champion v0**" in whole(evaluation, "retries")
    [gate] = result.get_asset_check_evaluations()
    assert gate.check_name == "evaluation_gate" and gate.passed and gate.metadata["would"].value == "keep"
    assert gate.metadata["difference"].value > 0 and "kept" in gate.metadata["reason"].value
    champion = metadata(result, "champion_scaffold")
    assert champion["decision"] == "kept" and (champion["champion_before"], champion["champion_after"]) == (0, 1)
    # Links read as their role and short id: a long URL would widen Dagster's value column past the page.
    assert champion["mlflow_candidate_run"].startswith("[MLflow candidate run ")
    assert "data:image/png;base64," in champion["progression_by_version"] and "[champion]" in whole(champion, "lineage")

    # The files say the same: champion pointer moved, v1 saved, MLflow has both runs.
    assert storage.storage().load_lineage("crafter").champion().version == 1
    assert {"crafter-v0", "crafter-v1"} <= set(instance.get_dynamic_partitions("scaffold_versions"))
    # Each version partition the round made or decided is materialized (none stays "Missing"), and
    # the champion's data version is the new champion's content hash, so what used v0 goes stale.
    assert instance.get_materialized_partitions(dg.AssetKey("scaffold_version")) == {"crafter-v0", "crafter-v1"}
    v1_hash = content_hash(load_scaffold("crafter", 1, storage.storage().scaffolds))
    [promoted] = result.asset_materializations_for_node("champion_scaffold")
    assert promoted.tags["dagster/data_version"] == v1_hash
    client = mlflow_store.tracker().client
    tags = {role: client.get_run(run_id_of(champion[f"mlflow_{role}_run"])).data.tags
            for role in ("candidate", "champion")}
    assert tags["candidate"]["automem.decision"] == "kept" and tags["candidate"]["automem.version"] == "1"
    assert tags["champion"]["automem.version"] == "0"

    # The new version's partition shows its YAML and fate.
    version = dg.materialize([scaffold_version], partition_key="crafter-v1", resources=res, instance=instance)
    shown = metadata(version, "scaffold_version")
    assert shown["decision"] == "kept" and shown["champion"] is True and "WIN-MARKER" in shown["scaffold_full"]

    # The sensors react to this instance's materializations: this run decided its evaluation itself
    # (champion_scaffold ran in it), so the gate sensor promotes nothing; (opt-in) the next round
    # starts because the candidate was kept.
    gate_tick = evaluation_gate_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert gate_tick.run_requests == [] and "decided in their own run" in gate_tick.skip_message
    next_tick = next_round_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert [r.partition_key for r in next_tick.run_requests] == ["crafter"]
    # (opt-in) and a proficiency round on the new champion, whose specialist learnt from the old one
    proficiency_tick = new_champion_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert [r.partition_key for r in proficiency_tick.run_requests] == ["crafter"]  # its job: proficiency_round_job

    # A retried promotion shows the recorded decision instead of deciding twice.
    again = dg.materialize(ROUND, partition_key="crafter", resources=res, instance=instance,
                           selection=[champion_scaffold])
    assert metadata(again, "champion_scaffold")["decision"] == "kept"
    assert storage.storage().load_lineage("crafter").champion().version == 1

def test_a_rejected_revision_finishes_the_graph_and_keeps_the_champion(tmp_path, storage, scripted, resources):
    bad = ["not json at all", json.dumps({"rationale": "Only wording changes here, nothing structural at all."})]
    server = scripted(meta_rules(storage, bad) + GAME_RULES)
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))
    result = dg.materialize(ROUND, partition_key="crafter", resources=resources(server),
                            instance=instance, run_config=RUN_CONFIG)

    assert result.success
    candidate = metadata(result, "scaffold_candidate")
    assert candidate["outcome"] == "rejected" and candidate["reason"].startswith("no valid revision in 3 attempts")
    assert metadata(result, "candidate_evaluation")["outcome"] == "no candidate"
    champion = metadata(result, "champion_scaffold")
    assert champion["decision"] == "no candidate" and champion["champion_before"] == champion["champion_after"] == 0
    [gate] = result.get_asset_check_evaluations()
    # Nothing to decide is an ordinary outcome of a round, not a fault: the check passes and says so.
    assert gate.passed and gate.metadata["would"].value == "nothing to decide"
    lineage = storage.storage().load_lineage("crafter")
    assert lineage.champion().version == 0 and [r.version for r in lineage.versions] == [0]
    assert "crafter-v1" not in instance.get_dynamic_partitions("scaffold_versions")
    context = dg.build_sensor_context(instance=instance, definitions=defs)
    assert evaluation_gate_sensor.evaluate_tick(context).run_requests == []

def test_a_round_that_failed_in_evaluation_is_resumed_by_the_next_one(tmp_path, storage, scripted, resources):
    """v1 is left pending by an endpoint failure; the next round skips rollouts and diagnosis and finishes v1."""
    win_then_fail = json.loads(winning_patch())
    win_then_fail["plan_prompt"] += " FAIL-MARKER"
    failing = scripted(meta_rules(storage, [json.dumps(win_then_fail)]) + [{"match": "FAIL-MARKER", "status": 400}]
                       + GAME_RULES)
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))
    first = dg.materialize(ROUND, partition_key="crafter", resources=resources(failing),
                           instance=instance, run_config=RUN_CONFIG, raise_on_error=False)
    assert not first.success and metadata(first, "scaffold_candidate")["outcome"] == "accepted"
    # An HTTP 400 would fail again: the evaluation shard is not retried (SHARD_RETRY waits 10 s, 20 s, then 40 s).
    assert not [e for e in first.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    failure = next(e for e in first.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_key.startswith("candidate_evaluation") and "Not retried" in str(failure.event_specific_data)
    lineage = storage.storage().load_lineage("crafter")
    assert lineage.champion().version == 0 and lineage.record(1).decision is None

    healed = scripted(GAME_RULES)
    second = dg.materialize(ROUND, partition_key="crafter", resources=resources(healed),
                            instance=instance, run_config=RUN_CONFIG)
    assert second.success
    assert metadata(second, "rollout_batch")["outcome"] == "skipped"
    assert metadata(second, "diagnosis")["outcome"] == "skipped"
    resumed = metadata(second, "scaffold_candidate")
    assert resumed["outcome"] == "resumed" and resumed["candidate"] == "v1" and "WIN-MARKER" in resumed["diff_full"]
    assert metadata(second, "champion_scaffold")["decision"] == "kept"
    assert storage.storage().load_lineage("crafter").champion().version == 1
