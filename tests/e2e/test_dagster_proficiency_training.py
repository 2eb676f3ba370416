"""A whole proficiency round materialized in process on real Crafter (tests/proficiency_round_rules.py's
scripted models) with a real LoRA training: the packaged SmolLM2 trained with torch for one step, then
served by the vLLM stand-in; the promotion, a second round while the adapter is pending and a later
adapter paired with the one in service."""

from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest
from builders import metadata, run_id_of, whole
from proficiency_round_rules import GAME_RULES, META_RULES, ROUND, proficiency_resources, round_config

from automem_dagster.defs import defs
from automem_dagster.defs.proficiency.assets import champion_specialist
from automem_dagster.defs.proficiency.sensors import specialist_gate_sensor
from automem_dagster.loop.noise import load_noise
from automem_dagster.loop.proficiency import register_adapter, registry
from automem_dagster.rollout import load_summary
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.tracking.runs import specialist_model_name

resources = proficiency_resources


@pytest.mark.integration
def test_a_round_trains_a_specialist_that_the_promotion_keeps(tmp_path, storage, scripted, resources):
    """proficiency_round_job, then (as the sensor would start it) promote_specialist_job; a second
    round while the adapter is pending evaluates it again instead of training another."""
    server = scripted(META_RULES + GAME_RULES)
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))
    res = resources(server)
    round_assets = [a for a in ROUND if a is not champion_specialist]
    result = dg.materialize(round_assets, partition_key="crafter", resources=res, instance=instance,
                            run_config=round_config(shards=2))

    assert result.success
    # Rollouts and the evaluation batches in seed shards, one step each (the specialist's connects as the
    # two-model agent, the champion's without its memory role); no A/A is stored for the champion's
    # identity, so its batch and a replay of it are played, and they measure the noise floor.
    assert shard_steps(result) == ["specialist_evaluation_shard[champion_0]", "specialist_evaluation_shard[champion_1]",
                                   "specialist_evaluation_shard[champion_replay_0]",
                                   "specialist_evaluation_shard[champion_replay_1]",
                                   "specialist_evaluation_shard[specialist_0]", "specialist_evaluation_shard[specialist_1]",
                                   "training_rollouts_shard[training_0]", "training_rollouts_shard[training_1]"]
    assert metadata(result, "training_rollouts")["episodes"] == 4
    dataset = metadata(result, "sft_dataset")
    assert dataset["outcome"] == "curated" and dataset["examples"] >= 6 and len(dataset["dataset_version"]) == 16
    # The scripted game only plays `do`, which rarely changes anything, so the agent skips most LOG turns
    # (nothing new to record): the dataset's examples come from the PLAN phase.
    assert "| reviewed_kept |" in dataset["fates"] and "| plan |" in dataset["examples_by_phase"]
    assert dataset["excluded_episodes"] == "none"
    config = metadata(result, "lora_config")
    assert config["source"] == "meta-LLM" and '"rank": 8' in config["settings"] and config["attempts"] == "1. valid"
    adapter = metadata(result, "lora_adapter")
    assert adapter["outcome"] == "trained" and adapter["adapter"] == "a1"
    assert adapter["dataset_version"] == dataset["dataset_version"] and " -> " in adapter["validation_loss"]
    assert adapter["train_s_per_step"] > 0 and adapter["validation_s_per_pass"] > 0 and adapter["peak_rss_mb"] > 0
    assert "tokens_per_second" in adapter
    assert "data:image/png;base64," in adapter["loss_plot"] and adapter["mlflow_training_run"].startswith("[MLflow ")
    evaluation = metadata(result, "specialist_evaluation")
    assert evaluation["outcome"] == "evaluated" and evaluation["adapter"] == "a1"
    assert evaluation["specialist_mean"] > evaluation["champion_mean"] == 0.0
    assert "± " in whole(evaluation, "progression") and "data:image/png;base64," in evaluation["behaviour_plot"]
    assert set(evaluation["endpoints"]) >= {"game", "memory"}
    [gate] = result.get_asset_check_evaluations()
    assert gate.check_name == "specialist_gate" and gate.passed and gate.metadata["difference"].value > 0
    reg = registry(storage.storage(), "crafter")
    assert reg.champion is None and reg.pending().id == "a1" and reg.adapters[0].gguf.endswith("adapter.gguf")

    # MLflow: the training run, and the adapter as a version of the registered model.
    client = res["mlflow"].tracker().client
    training = client.get_run(run_id_of(adapter["mlflow_training_run"]))
    assert training.data.tags["automem.role"] == "training" and "validation_loss" in training.data.metrics
    [version] = client.search_model_versions(f"name='{specialist_model_name('crafter')}'")
    assert version.run_id == training.info.run_id and version.tags["automem.adapter"] == "a1"

    # A round while a1 is pending: no rollouts, no curation, no training; a1 is evaluated again.
    resumed = dg.materialize(round_assets, partition_key="crafter", resources=res, instance=instance,
                             run_config=round_config())
    assert resumed.success
    assert [metadata(resumed, a)["outcome"] for a in ("training_rollouts", "sft_dataset", "lora_config")] == \
        ["skipped"] * 3
    assert metadata(resumed, "lora_adapter")["outcome"] == "resumed" and "mlflow_training_run" not in \
        metadata(resumed, "lora_adapter")
    assert metadata(resumed, "specialist_evaluation")["adapter"] == "a1"
    assert [a.id for a in registry(storage.storage(), "crafter").adapters] == ["a1"]

    # The sensor promotes each evaluation; the promotion decides once and moves the pointer.
    tick = specialist_gate_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert [r.partition_key for r in tick.run_requests] == ["crafter", "crafter"]
    promotion = dg.materialize(ROUND, partition_key="crafter", resources=res, instance=instance,
                               selection=[champion_specialist])
    champion = metadata(promotion, "champion_specialist")
    assert champion["decision"] == "kept" and champion["adapter"] == "a1"
    assert (champion["specialist_before"], champion["specialist_after"]) == ("none (one-model agent)", "a1")
    assert "data:image/png;base64," in champion["progression"]
    reg = registry(storage.storage(), "crafter")
    assert reg.champion == "a1" and reg.pending() is None and reg.adapters[0].decision == "kept"
    tags = {role: client.get_run(run_id_of(champion[f"mlflow_{role}_run"])).data.tags
            for role in ("specialist", "champion")}
    assert tags["specialist"]["automem.role"] == "specialist" and tags["specialist"]["automem.decision"] == "kept"
    assert tags["champion"]["automem.role"] == "champion"
    # MLflow's registry names the specialist in service: the kept version is the model's champion alias.
    served = client.get_model_version_by_alias(specialist_model_name("crafter"), "champion")
    assert served.tags["automem.adapter"] == "a1" and served.tags["automem.decision"] == "kept"
    assert "kept" in served.tags["automem.decision_reason"]

    # A retried promotion shows the recorded decision instead of deciding twice.
    again = dg.materialize(ROUND, partition_key="crafter", resources=res, instance=instance,
                           selection=[champion_specialist])
    assert metadata(again, "champion_specialist")["decision"] == "kept"
    assert "mlflow_specialist_run" not in metadata(again, "champion_specialist")

    # A new adapter is paired with the agent in service, the two-model agent with a1, not the one-model
    # agent. a2 is a1's files registered again (a known answer: the two agents play alike, nothing is kept).
    register_adapter(storage.storage(), "crafter", replace(reg.record("a1"), id="a2", decision=None, reason=None,
                                                          comparison=None, training_run=None))
    later = dg.materialize(round_assets, partition_key="crafter", resources=res, instance=instance,
                           run_config=round_config())
    assert "specialist_evaluation_shard[champion_replay_0]" in shard_steps(later)
    value = later.output_for_node("specialist_evaluation")
    # No floor is stored for a1's agent yet, so this round plays it again beside a2 (the shard above): the
    # stand-in keys its cycling LOG notes (NOTES) by the request's seed, so the replay is bit-identical to
    # a1's batch, the A/A says so, and the decision pairs a2 with that batch.
    assert value.plan.challenger == "a2" and value.champion_batch.endswith("-specialist-a1")
    assert load_noise(storage.storage(), load_summary(Path(value.champion_batch))).bit_identical
    memory = {arm: read_manifest(Path(batch))["identity"]["roles"]["memory"]["model"]
              for arm, batch in (("specialist", value.challenger_batch), ("champion", value.champion_batch))}
    assert "a2" in memory["specialist"] and "a1" in memory["champion"]
    assert value.scores["per_seed"]["specialist"] == value.scores["per_seed"]["champion"]
    settled = dg.materialize(ROUND, partition_key="crafter", resources=res, instance=instance,
                             selection=[champion_specialist])
    assert metadata(settled, "champion_specialist")["decision"] != "kept"
    assert registry(storage.storage(), "crafter").champion == "a1"


def shard_steps(result: dg.ExecuteInProcessResult) -> list[str]:
    return sorted(e.step_key.split(".", 1)[1] for e in result.all_events
                  if e.event_type_value == "STEP_SUCCESS" and "_shard[" in e.step_key)
