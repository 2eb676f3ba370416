"""Dagster definitions: they load with every asset, check, job, sensor and schedule; partitions follow the
scaffolds on disk; the schedule and the gate sensor request what they should; long values read at a glance."""

from datetime import UTC, datetime

import dagster as dg

from automem_dagster.defs import defs
from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.execution.partitions import game_of, game_partitions, parse_version_key
from automem_dagster.defs.metadata.long_values import link, long_text, wrapping
from automem_dagster.defs.proficiency.sensors import new_champion_sensor
from automem_dagster.defs.structure.schedules import weekly_structure_round
from automem_dagster.defs.structure.sensors import evaluation_gate_sensor, next_round_sensor, scaffold_versions_sensor
from automem_dagster.scaffold import load_scaffold, save_scaffold


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
                                                    "textworld-coin_collector", "keydoor-hall4-decoys2", "courier-walk3-parcels3"]
    assert [game_of(k) for k in game_partitions.get_partition_keys()] == ["crafter", "minihack:Corridor-R3", "nethack",
                                                                          "babyai:GoToLocal", "textworld:coin_collector",
                                                                          "keydoor:hall4-decoys2", "courier:walk3-parcels3"]
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
                                                   "textworld-coin_collector", "keydoor-hall4-decoys2", "courier-walk3-parcels3"]
    assert len({r.run_key for r in requests}) == 7

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
