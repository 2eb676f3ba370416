"""Dagster definitions: they load, and whole rounds materialize in-process on real Crafter.

Every model is one scripted OpenAI-compatible server (as in test_structure_round): the game
model plays ``do`` only when the PLAN prompt carries ``WIN-MARKER``, so a patch adding the
marker makes a candidate that really wins on the evaluation seeds. Storage, lineage and the
MLflow store live in tmp_path; the budget is 2 episodes of 3 (rollouts) and 10 (evaluation) steps.
"""

import json
import subprocess
import sys
from datetime import UTC, datetime

import dagster as dg
import pytest
from builders import metadata, mlflow_resource, round_resources, run_id_of, whole

from automem_dagster.defs import defs
from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.common.long_values import link, long_text, wrapping
from automem_dagster.defs.common.partitions import game_of, game_partitions, parse_version_key
from automem_dagster.defs.common.resources import MlflowResource, StorageResource
from automem_dagster.defs.evaluation.checks import evaluation_gate
from automem_dagster.defs.proficiency.sensors import new_champion_sensor
from automem_dagster.defs.structure.assets import (
    candidate_evaluation,
    champion_scaffold,
    diagnosis,
    rollout_batch,
    scaffold_candidate,
    scaffold_version,
)
from automem_dagster.defs.structure.schedules import weekly_structure_round
from automem_dagster.defs.structure.sensors import evaluation_gate_sensor, next_round_sensor, scaffold_versions_sensor
from automem_dagster.loop.structure import start_round
from automem_dagster.rollout import episode_id
from automem_dagster.scaffold import content_hash, load_scaffold, save_scaffold

ROUND = [rollout_batch, diagnosis, scaffold_candidate, candidate_evaluation, champion_scaffold, evaluation_gate]
# AutoMem's rule, no floor measured: a scripted win on 2 seeds is kept, so the keep path runs end to end.
RUN_CONFIG = dg.RunConfig(ops={"rollout_batch": RoundConfig(rollout_max_steps=3, gate="higher_mean"),
                               "candidate_evaluation": RoundConfig(gate="higher_mean")})
GAME_RULES = [
    {"match": "Phase: LOG", "reply": "<|DONE|>"},
    {"match": "WIN-MARKER", "reply": "<|ACTION|>do<|END|>"},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"},
]


# --- the definitions -------------------------------------------------------------------------

def test_definitions_load_with_every_asset_check_job_sensor_and_schedule():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} >= {  # and the proficiency loop's
        "scaffold_version", "rollout_batch", "diagnosis", "scaffold_candidate", "candidate_evaluation",
        "champion_scaffold"}
    assert dg.AssetCheckKey(dg.AssetKey("candidate_evaluation"), "evaluation_gate") in graph.asset_check_keys
    round_job = defs.resolve_job_def("structure_round_job")
    sharded = {f"{asset}{step}" for asset in ("rollout_batch", "candidate_evaluation")  # the sharded graphs
               for step in ("", "_plan", "_shard", "_merge")}
    assert {n.name for n in round_job.all_node_defs} == sharded | {
        "diagnosis", "scaffold_candidate", "candidate_evaluation_evaluation_gate"}
    assert {n.name for n in defs.resolve_job_def("promote_job").all_node_defs} == {"champion_scaffold"}
    assert evaluation_gate_sensor.job_name == "promote_job"
    assert next_round_sensor.job_name == "structure_round_job"
    assert next_round_sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert new_champion_sensor.job_name == "proficiency_round_job"
    assert new_champion_sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert defs.resolve_sensor_def("evaluation_gate_sensor") and defs.resolve_sensor_def("next_round_sensor")
    groups = {str(k.to_user_string()): g for k, g in defs.resolve_assets_def("rollout_batch").group_names_by_key.items()}
    assert groups == {"rollout_batch": "structure"}
    assert defs.resolve_assets_def("candidate_evaluation").group_names_by_key[dg.AssetKey("candidate_evaluation")] == \
        "evaluation"
    assert game_partitions.get_partition_keys() == ["crafter", "minihack-Corridor-R3", "nethack", "babyai-GoToLocal",
                                                    "textworld-coin_collector"]
    assert [game_of(k) for k in game_partitions.get_partition_keys()] == ["crafter", "minihack:Corridor-R3", "nethack",
                                                                          "babyai:GoToLocal", "textworld:coin_collector"]
    assert parse_version_key("minihack-v12") == ("minihack", 12)
    # Assets that play episodes do so in shard steps that retry (a shard resumes, so a retry replays
    # only its unfinished episodes) and take a slot of the model endpoints' pool.
    for name in ("rollout_batch", "candidate_evaluation", "training_rollouts", "specialist_evaluation"):
        shard = defs.resolve_assets_def(name).node_def.node_named(f"{name}_shard").definition
        assert shard.retry_policy.max_retries >= 1 and shard.pool == "game_endpoint", name
    assert defs.resolve_assets_def("champion_scaffold").op.retry_policy is None  # a decision is taken once
    # The launchpad opens prefilled with the documented defaults of every configurable asset.
    prefilled = defs.resolve_job_def("structure_round_job").get_run_config_for_partition_key("crafter")["ops"]
    assert set(prefilled) == {"rollout_batch", "diagnosis", "scaffold_candidate", "candidate_evaluation"}
    assert prefilled["rollout_batch"]["config"] == RoundConfig().model_dump(exclude_none=True)


@pytest.mark.contract
def test_loading_the_definitions_prints_no_preview_or_beta_warning():
    """What ``make dagster`` loads: Dagster's preview warning for partitioned checks is silenced where
    the checks are defined, and nothing else of Dagster's warns."""
    code = "import warnings; warnings.simplefilter('error', Warning); import automem_dagster.defs"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_long_values_read_at_a_glance_with_the_whole_one_click_away():
    """Up to what Dagster's asset page shows whole, a text stays as it is; a longer one is summed up in
    one line under its key, the whole under ``<key>_full`` as Markdown (behind "[Show Markdown]")."""
    assert long_text("reason", "kept: +4.5 points") == {"reason": "kept: +4.5 points"}
    short_md = long_text("diff", "```diff\n+ a\n```", markdown=True)["diff"]
    assert isinstance(short_md, dg.MarkdownMetadataValue) and short_md.value == "```diff\n+ a\n```"
    reason = "rolled back: tie on seeds 42-43 " + "and a long explanation " * 60
    shown = long_text("reason", reason)
    assert shown["reason_full"].value == reason and len(shown["reason"]) < 240
    assert shown["reason"].startswith("rolled back: tie on seeds 42-43 and") and "the whole in reason_full" in shown["reason"]
    diff = "```diff\n" + "\n".join(f"+ line {i}" for i in range(200)) + "\n```"
    assert long_text("diff", diff, markdown=True)["diff"] == "+ line 0 (2,101 characters, 202 lines: the whole in diff_full)"
    # Code lines and table rows do not wrap: a wide one would push the page's values off its edge, so
    # it is rewritten to wrap (lines of text, list items), or summed up when even that is too long.
    lineage = "```\ncrafter lineage (champion v1)\n└── v0  baseline\n    └── v1  kept_up 4.5% vs 0.0% (n=2) on 2026-12-01\n```"
    assert long_text("lineage", lineage, markdown=True)["lineage"].value == (
        "crafter lineage (champion v1)  \n└── v0  baseline  \n\u00a0\u00a0\u00a0\u00a0└── v1  kept\\_up 4.5% vs 0.0% "
        "(n=2) on 2026-12-01")
    # a diff's lines stay lines: no list items, headings or emphasis made of its marks
    assert wrapping("```diff\n- memory.max_lines: 100\n+ memory.max_lines: 20 and *pruned*\n---\n1. x\n```") == \
        "\\- memory.max\\_lines: 100  \n\\+ memory.max\\_lines: 20 and \\*pruned\\*  \n\\---  \n1\\. x"
    table = "| batch | calls | time lost to retries s | model latency s |\n|---|---:|---:|---:|\n| v1 | 24 | 0.00 | 1.2 |"
    assert long_text("retries", table, markdown=True)["retries"].value == \
        "- **v1**: calls: 24, time lost to retries s: 0.00, model latency s: 1.2"
    assert set(long_text("retries", "\n".join([table] + [table.splitlines()[-1]] * 40), markdown=True)) == \
        {"retries", "retries_full"}
    assert long_text("settings", '```json\n{\n  "rank": 8\n}\n```', markdown=True)["settings"].value.startswith("```")
    assert link("MLflow candidate run 0123abcd", "http://x/#/runs/0123").value == \
        "[MLflow candidate run 0123abcd](http://x/#/runs/0123)"


def test_every_scaffold_version_on_disk_gets_its_partition(tmp_path, storage):
    """A version made outside any round (here a file saved by hand, as ``automem propose`` or DVC would)
    gets its ``scaffold_version`` partition and a materialization with its fate from the sensor."""
    store = storage.storage()
    v0 = load_scaffold("crafter", 0, store.scaffolds)
    save_scaffold(v0.model_copy(update={"version": 7, "parent": 0, "description": "made by hand"}), store.scaffolds)
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))
    context = dg.build_sensor_context(instance=instance, resources={"storage": storage})
    result = scaffold_versions_sensor(context)
    shown = {e.partition: {k: v.value for k, v in e.metadata.items()} for e in result.asset_events}
    assert {"crafter-v0", "crafter-v7"} <= set(shown) <= set(instance.get_dynamic_partitions("scaffold_versions"))
    assert shown["crafter-v7"]["parent"] == "v0" and shown["crafter-v7"]["description"] == "made by hand"
    assert shown["crafter-v7"]["decision"] == "not in the lineage"
    tick = scaffold_versions_sensor.evaluate_tick(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(
        tempdir=str(tmp_path / "fresh")), resources={"storage": storage}))
    assert tick.skip_message.startswith("recorded the scaffold_version partitions crafter-v0")  # not "an empty result"
    assert isinstance(scaffold_versions_sensor(dg.build_sensor_context(instance=instance, resources={"storage": storage})),
                      dg.SkipReason)  # each version once


def test_weekly_schedule_starts_one_round_per_game():
    schedule = defs.resolve_schedule_def("weekly_structure_round")
    assert schedule.cron_schedule == "0 3 * * 1" and schedule.job_name == "structure_round_job"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    context = dg.build_schedule_context(scheduled_execution_time=datetime(2025, 1, 6, 3, tzinfo=UTC),
                                       repository_def=defs.get_repository_def())
    requests = weekly_structure_round.evaluate_tick(context).run_requests
    assert [r.partition_key for r in requests] == ["crafter", "minihack-Corridor-R3", "nethack", "babyai-GoToLocal",
                                                   "textworld-coin_collector"]
    assert len({r.run_key for r in requests}) == 5


def test_gate_sensor_requests_one_promotion_per_evaluated_game(tmp_path):
    """Evaluations of several games between two ticks each get a promotion; one without a candidate none."""
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path))
    for game, outcome in (("crafter", "evaluated"), ("minihack-Corridor-R3", "no candidate"), ("nethack", "evaluated")):
        instance.report_runless_asset_event(dg.AssetMaterialization(
            "candidate_evaluation", partition=game, metadata={"outcome": outcome}))
    first = evaluation_gate_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert [r.partition_key for r in first.run_requests] == ["crafter", "nethack"]
    assert all(r.run_key.startswith("promote-") for r in first.run_requests)
    again = evaluation_gate_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=first.cursor,
                                                                         definitions=defs))
    assert again.run_requests == [] and again.cursor == first.cursor


# --- whole rounds, in process -----------------------------------------------------------------

def meta_rules(storage: StorageResource, patches: list[str]) -> list[dict]:
    store = storage.storage()
    seed = start_round(RUN_CONFIG.ops["rollout_batch"].settings("crafter"), store).seeds[0]
    reply = {"summary": "The agent never acts on what it sees and idles every step.", "findings": [
        {"episode": episode_id("crafter", seed), "step": 1, "kind": "stuck", "what_happened": "noop again",
         "scaffold_cause": "the plan prompt does not push for interaction", "proposed_change": "warn when stuck"}]}
    return [{"match": "Diagnose this batch", "reply": json.dumps(reply)},
            {"match": "Propose one patch", "replies": patches}]


def winning_patch() -> str:
    plan = load_scaffold("crafter", 0).plan_prompt
    return json.dumps({"signals": {"stuck": {"enabled": True, "repeats": 2}},
                       "plan_prompt": plan + " WIN-MARKER: face a resource and use do.",
                       "rationale": "Finding 1: the agent idles; a stuck warning and a plan prompt that asks to interact."})


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
