"""The proficiency loop's Dagster layer: definitions load, the gate sensor chains promotions, and a
whole round materializes in-process on real Crafter.

Every model is one scripted OpenAI-compatible server (as in test_dagster_defs). The one-model
agent appends a note in LOG and reads the file back in PLAN before acting, so every write is
read by a later PLAN and curation finds credited decisions; the meta-LLM keeps every borderline
decision it reviews and recommends small LoRA settings. The adapter is really trained (the
packaged SmolLM2 with torch, a few steps) and served as a vLLM user's is: the endpoints file's
``memory:`` role is the scripted vLLM stand-in (conftest ``specialist_vllm``, the same rules), which
loads the adapter at runtime after the project checks its base, so the two-model agent runs
without the embedded server. The frozen game model of the two-model agent answers ``do`` while the one-model
champion answers ``noop``, so the specialist wins the gate and is kept.
"""

import json
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest
from builders import metadata, mlflow_resource, round_resources, run_id_of, whole

from automem_dagster.defs import defs
from automem_dagster.defs.proficiency.assets import (
    champion_specialist,
    lora_adapter,
    lora_config,
    sft_dataset,
    specialist_evaluation,
    training_rollouts,
)
from automem_dagster.defs.proficiency.checks import specialist_gate
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from automem_dagster.defs.proficiency.sensors import specialist_gate_sensor
from automem_dagster.loop.proficiency import register_adapter, registry
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.tracking.runs import specialist_model_name

ROUND = [training_rollouts, sft_dataset, lora_config, lora_adapter, specialist_evaluation, champion_specialist,
         specialist_gate]
PROFICIENCY_ASSETS = {"training_rollouts", "sft_dataset", "lora_config", "lora_adapter", "specialist_evaluation",
                      "champion_specialist"}
NOTES = [f"<|APPEND|>map_notes.txt|tree seen at spot {i}\n<|DONE|>" for i in range(12)]
GAME_RULES = [
    {"match": "Phase: LOG", "replies": NOTES},
    # The frozen game model of the two-model agent, then the specialist's PLAN turns.
    {"match": "Phase: PLAN. Answer with the action.", "reply": "<|ACTION|>do<|END|>"},
    {"match": "(another model picks the action).\n<|READ|>", "reply": "<|DONE|>"},
    # The one-model agent: read the notes, then act on them.
    {"match": "then answer with the action.\n<|READ|>", "reply": "<|ACTION|>noop<|END|>"},
    {"match": "Phase: PLAN", "reply": "<|READ|>map_notes.txt"},
]
LORA_REPLY = {"reasoning": "A tiny dataset: a small rank, one epoch and some dropout against memorising.",
              "settings": {"rank": 8, "alpha": 16, "dropout": 0.05, "learning_rate": 2e-4, "epochs": 1,
                           "batch_size": 1, "target_modules": ["q_proj", "v_proj"], "max_length": 2048}}
META_RULES = [
    {"match": "You configure the LoRA fine-tuning", "reply": json.dumps(LORA_REPLY)},
    {"match": "Give a verdict", "reply": json.dumps({"verdicts": [
        {"id": i, "keep": True, "reason": "records where a tree is, read before acting"} for i in range(8)]})},
]


def round_config(**overrides) -> dg.RunConfig:
    """One budget for every asset of the round: 4 training episodes of 8 steps (the memory routine
    first writes at step 5 and the PLAN reads it there; curation credits only that, 3 examples an
    episode, so the held-out validation episode is small: on two CPU cores the trainer needs seconds
    per ~700-token Crafter prompt), a window of 2 steps, 1 optimizer step, 2 evaluation episodes of
    10 steps. No counterfactual replay (the default replays 4 decisions): these tests are about the
    assets, and a replayed verdict could drop the 6 examples they train on; tests/test_counterfactual.py
    checks the replay."""
    config = ProficiencyConfig(**{"rollout_episodes": 4, "rollout_max_steps": 8, "horizon": 2, "min_examples": 6,
                                  "max_review_batches": 4, "max_train_steps": 1, "base": "embedded",
                                  "gate": "higher_mean", "replay_decisions": 0, **overrides})
    return dg.RunConfig(ops={name: config for name in PROFICIENCY_ASSETS - {"champion_specialist"}})


# --- the definitions -------------------------------------------------------------------------

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
    settings = ProficiencyConfig().settings("crafter")
    assert settings.curation.min_examples == 16 and settings.curation.weights.horizon == 10
    assert (settings.budget.rollout_episodes, settings.budget.rollout_max_steps, settings.max_train_steps) == (2, 20, 20)
    assert ProficiencyConfig(min_examples=None).settings("nethack").curation.min_examples == 800
    lora = ProficiencyConfig(lora_settings=json.dumps(LORA_REPLY["settings"])).settings("crafter").lora
    assert lora is not None and lora.rank == 8
    with pytest.raises(ValueError, match="out of bounds"):
        ProficiencyConfig(lora_settings=json.dumps({**LORA_REPLY["settings"], "rank": 1024})).settings("crafter")


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


# --- whole rounds, in process -----------------------------------------------------------------

@pytest.fixture
def resources(tmp_path, storage, specialist_vllm):
    """The resources of a round whose game and meta endpoints are ``server`` and whose specialist is
    served by a vLLM stand-in answering ``server``'s rules."""

    return lambda server: round_resources(tmp_path, storage, server, mlflow_resource(tmp_path),
                                          memory=specialist_vllm(server.rules))


def test_too_small_a_dataset_stops_the_round_before_training(tmp_path, storage, scripted, resources):
    """The round stops at curation; the default counterfactual budget (4 decisions) still replays its sample
    first (about a second on the stand-in), and the asset's metadata says how the cheap score agreed."""
    server = scripted(META_RULES + GAME_RULES)
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))
    result = dg.materialize(ROUND, partition_key="crafter", resources=resources(server), instance=instance,
                            run_config=round_config(min_examples=10_000, replay_decisions=4), raise_on_error=False)

    assert not result.success
    assert metadata(result, "training_rollouts")["episodes"] == 4
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "sft_dataset"
    error = failure.step_failure_data.user_failure_data
    assert "fewer than the minimum of 10000" in error.description and "decisions.jsonl" in error.description
    assert error.metadata["examples"].value < 10_000
    assert error.metadata["calibration"].value.startswith("4 decisions replayed: ")
    assert not result.asset_materializations_for_node("lora_adapter")
    assert registry(storage.storage(), "crafter").adapters == []


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
    assert "| reviewed_kept |" in dataset["verdicts"] and "| plan |" in dataset["examples_by_phase"]
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
    # The stand-in's LOG notes cycle across requests (NOTES), so a replay is not bit-identical: the first
    # round's A/A said so, and this round pairs a2 with a1's agent played again beside it.
    assert value["adapter"] == "a2" and value["champion_batch"].endswith("-specialist-a1-replay-specialist-a2")
    memory = {arm: read_manifest(Path(value[f"{arm}_batch"]))["identity"]["roles"]["memory"]["model"]
              for arm in ("specialist", "champion")}
    assert "a2" in memory["specialist"] and "a1" in memory["champion"]
    assert value["per_seed"]["specialist"] == value["per_seed"]["champion"]
    settled = dg.materialize(ROUND, partition_key="crafter", resources=res, instance=instance,
                             selection=[champion_specialist])
    assert metadata(settled, "champion_specialist")["decision"] != "kept"
    assert registry(storage.storage(), "crafter").champion == "a1"


def shard_steps(result: dg.ExecuteInProcessResult) -> list[str]:
    return sorted(e.step_key.split(".", 1)[1] for e in result.all_events
                  if e.event_type_value == "STEP_SUCCESS" and "_shard[" in e.step_key)
