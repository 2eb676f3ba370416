"""A round the CLI runs is a Dagster run in the project's instance: every step materialized, the gate checked.

The round is ``automem revise``'s own function (``commands.structure.structure_round``) against
one scripted server (the rules of test_dagster_defs: a patch adding ``WIN-MARKER`` wins, one
without a structural change is rejected). Afterwards the instance under ``$DAGSTER_HOME`` is
queried through Dagster's Python API: the run (its job, its tag), each asset's materialization in
it, the ``evaluation_gate`` result, the ``scaffold_versions`` partitions, and the sensors, which
leave a round that decided itself, and that the CLI chains, alone.
"""

import json

import builders
import dagster as dg
import pytest
import test_dagster_proficiency as proficiency
from builders import whole
from test_dagster_defs import GAME_RULES, RUN_CONFIG, meta_rules, winning_patch

from automem_dagster.commands import shared
from automem_dagster.commands.proficiency import proficiency_round
from automem_dagster.commands.structure import structure_round
from automem_dagster.defs import defs
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from automem_dagster.defs.proficiency.sensors import specialist_gate_sensor
from automem_dagster.defs.structure.sensors import evaluation_gate_sensor, next_round_sensor

SETTINGS = RUN_CONFIG.ops["rollout_batch"].settings("crafter")
STRUCTURE_ASSETS = ["rollout_batch", "diagnosis", "scaffold_candidate", "candidate_evaluation", "champion_scaffold"]


def endpoints_file(tmp_path, server, roles=("game", "meta"), memory=None):
    return builders.endpoints_file(tmp_path / "endpoints.yaml", server, roles, memory)


def cli_round(tmp_path, monkeypatch, storage, server) -> dg.DagsterInstance:
    """One ``automem revise`` round on ``server``; returns the instance it reported to (conftest
    points ``$DAGSTER_HOME`` at ``tmp_path / "dagster_home"``)."""
    monkeypatch.setattr(shared, "STORAGE", storage.storage())
    structure_round(SETTINGS, endpoints_file(tmp_path, server), tracker=None)
    return dg.DagsterInstance.from_config(str(tmp_path / "dagster_home"))


def latest_record(instance: dg.DagsterInstance, asset: str, partition: str = "crafter") -> dg.EventLogRecord:
    [record] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
    return record


def latest(instance: dg.DagsterInstance, asset: str, partition: str = "crafter") -> dict:
    return {k: v.value for k, v in latest_record(instance, asset, partition).asset_materialization.metadata.items()}


def one_cli_run(instance: dg.DagsterInstance, assets: list[str], job: str) -> None:
    """Every one of ``assets`` was materialized by one successful run of ``job``, tagged as the CLI's."""
    [run_id] = {latest_record(instance, asset).run_id for asset in assets}
    run = instance.get_run_by_id(run_id)
    assert run.job_name == job and run.status == dg.DagsterRunStatus.SUCCESS
    assert run.tags["automem/driver"] == "cli" and run.tags["dagster/partition"] == "crafter"


def gate_evaluation(instance: dg.DagsterInstance):
    key = dg.AssetCheckKey(dg.AssetKey("candidate_evaluation"), "evaluation_gate")
    [record] = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
    return record.event.dagster_event.event_specific_data


def test_a_cli_round_is_one_dagster_run_with_every_asset_and_the_gate(tmp_path, monkeypatch, storage, scripted):
    server = scripted(meta_rules(storage, [winning_patch()]) + GAME_RULES)
    with cli_round(tmp_path, monkeypatch, storage, server) as instance:
        one_cli_run(instance, STRUCTURE_ASSETS, "structure_full_round_job")
        shown = {asset: latest(instance, asset) for asset in STRUCTURE_ASSETS}
        assert shown["rollout_batch"]["episodes"] == 2 and shown["diagnosis"]["findings"] == 1
        assert shown["scaffold_candidate"]["outcome"] == "accepted"
        assert "stuck.enabled False -> True" in shown["scaffold_candidate"]["diff_full"]  # long: one click away
        evaluation = shown["candidate_evaluation"]
        assert evaluation["outcome"] == "evaluated" and evaluation["candidate"] == "v1"
        assert evaluation["candidate_mean"] > evaluation["champion_mean"] == 0.0
        assert "data:image/png;base64," in evaluation["behaviour_plot"] and "± " in whole(evaluation, "progression")
        champion = shown["champion_scaffold"]
        assert champion["decision"] == "kept" and (champion["champion_before"], champion["champion_after"]) == (0, 1)
        assert "data:image/png;base64," in champion["progression_by_version"]
        # the round measured the champion's noise floor (none was stored) and says how the champion was played
        assert whole(champion, "noise_floor").startswith("noise floor ") and champion["champion_play"] != "not recorded"

        gate = gate_evaluation(instance)
        assert gate.passed and gate.partition == "crafter" and gate.metadata["would"].value == "keep"
        assert "kept" in gate.metadata["reason"].value

        # Both versions are partitions, each materialized with its YAML and fate.
        assert instance.get_dynamic_partitions("scaffold_versions") == ["crafter-v0", "crafter-v1"]
        v1 = latest(instance, "scaffold_version", "crafter-v1")
        assert v1["decision"] == "kept" and v1["champion"] is True and "WIN-MARKER" in v1["scaffold_full"]
        assert latest(instance, "scaffold_version", "crafter-v0")["champion"] is False

        # The run decided already: the gate sensor starts no promotion for it; and the CLI chains its own
        # rounds, so the (opt-in) next-round sensor starts none after its keep either.
        tick = evaluation_gate_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
        assert tick.run_requests == []
        tick = next_round_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
        assert tick.run_requests == []


def test_a_rejected_cli_round_shows_why_and_a_passing_gate(tmp_path, monkeypatch, storage, scripted):
    bad = ["not json at all", json.dumps({"rationale": "Only wording changes here, nothing structural at all."})]
    server = scripted(meta_rules(storage, bad) + GAME_RULES)
    with cli_round(tmp_path, monkeypatch, storage, server) as instance:
        one_cli_run(instance, STRUCTURE_ASSETS, "structure_full_round_job")
        candidate = latest(instance, "scaffold_candidate")
        assert candidate["outcome"] == "rejected" and candidate["reason"].startswith("no valid revision in 3 attempts")
        assert latest(instance, "candidate_evaluation")["outcome"] == "no candidate"
        assert latest(instance, "champion_scaffold")["decision"] == "no candidate"
        gate = gate_evaluation(instance)
        assert gate.passed and gate.metadata["would"].value == "nothing to decide"
        assert instance.get_dynamic_partitions("scaffold_versions") == ["crafter-v0"]


@pytest.mark.integration
def test_a_cli_proficiency_round_is_one_dagster_run_with_every_asset_and_the_gate(tmp_path, monkeypatch, storage, scripted,
                                                                   specialist_vllm):
    """``automem train``'s round (test_dagster_proficiency's scripted rules and budget: a real
    one-step training, the specialist served by a vLLM stand-in), then its run, each proficiency asset
    and ``specialist_gate`` read from the instance."""
    rules = proficiency.META_RULES + proficiency.GAME_RULES
    server, memory = scripted(rules), specialist_vllm(rules)
    monkeypatch.setattr(shared, "STORAGE", storage.storage())
    # No counterfactual replay (round_config's reason: the round, not the replay, is tested here).
    settings = ProficiencyConfig(rollout_episodes=4, rollout_max_steps=8, horizon=2, min_examples=6, max_review_batches=4,
                                 max_train_steps=1, base="embedded", gate="higher_mean",
                                 replay_decisions=0).settings("crafter")
    proficiency_round(settings, endpoints_file(tmp_path, server, memory=memory), tracker=None)
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        one_cli_run(instance, list(proficiency.PROFICIENCY_ASSETS), "proficiency_full_round_job")
        shown = {a: latest(instance, a) for a in proficiency.PROFICIENCY_ASSETS}
        assert shown["training_rollouts"]["episodes"] == 4 and shown["sft_dataset"]["outcome"] == "curated"
        assert shown["lora_config"]["source"] == "meta-LLM" and shown["lora_adapter"]["outcome"] == "trained"
        assert "data:image/png;base64," in shown["lora_adapter"]["loss_plot"]
        evaluation = shown["specialist_evaluation"]
        assert evaluation["specialist_mean"] > evaluation["champion_mean"] == 0.0
        assert "data:image/png;base64," in evaluation["behaviour_plot"]
        assert shown["champion_specialist"]["decision"] == "kept"
        key = dg.AssetCheckKey(dg.AssetKey("specialist_evaluation"), "specialist_gate")
        [record] = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
        gate = record.event.dagster_event.event_specific_data
        assert gate.passed and gate.metadata["would"].value == "keep"
        tick = specialist_gate_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
        assert tick.run_requests == []
