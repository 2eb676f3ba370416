"""The proficiency loop's small parts: LoRA settings bounds, the meta-LLM recommendation, the
specialist registry, the two-model endpoints and the training seeds (no model, no training)."""

from __future__ import annotations

import json

import pytest
from lora_inputs import GOOD
from pydantic import ValidationError

from automem_dagster.llm.config import EndpointConfig, EndpointsConfig
from automem_dagster.llm.strict_schema import strict_violations
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.gate import paired_verdict
from automem_dagster.loop.proficiency import start_proficiency_round
from automem_dagster.loop.seed_blocks import round_seeds
from automem_dagster.loop.serving import specialist_endpoints
from automem_dagster.loop.settings import ProficiencyBudget, ProficiencyConfig
from automem_dagster.loop.storage import Storage
from automem_dagster.meta.lora_config import LoraChoice, reply_schema, validate_settings
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.rollout import BatchSummary, EpisodeSummary
from automem_dagster.rollout.seeds import eval_seeds
from automem_dagster.training.registry import AdapterRecord, RegistryError, SpecialistRegistry
from automem_dagster.training.settings import LoraSettings, default_settings


def test_defaults_scale_reference_to_the_base():
    small, large = default_settings(576), default_settings(5120)
    assert (large.rank, large.alpha, large.learning_rate) == (128, 256, 5e-5)      # the AutoMem paper's, as published
    assert (small.rank, small.alpha) == (16, 32) and small.learning_rate > large.learning_rate


@pytest.mark.parametrize("change, field", [
    ({"rank": 1024}, "rank"), ({"learning_rate": 0.5}, "learning_rate"), ({"dropout": 0.9}, "dropout"),
    ({"epochs": 0}, "epochs"), ({"target_modules": ["lm_head"]}, "target_modules"), ({"alpha": 500}, "alpha/rank"),
    ({"max_length": 64}, "max_length"),
])
def test_a_config_outside_bounds_is_rejected(change, field):
    with pytest.raises(ValidationError, match=field):
        LoraSettings(**{**GOOD, **change})
    with pytest.raises(ValueError, match="out of bounds"):
        validate_settings({**GOOD, **change})


def test_the_reply_schema_carries_the_bounds():
    schema = reply_schema()
    assert strict_violations(schema) == []
    props = schema["properties"]["settings"]["properties"]
    assert props["rank"]["maximum"] == 256 and props["learning_rate"]["maximum"] == 1e-3
    assert "lm_head" not in props["target_modules"]["items"]["enum"]


def test_given_settings_are_announced_as_given_not_as_a_recommendation():
    """The demo gives its settings: the console must not say the meta-LLM recommended them."""
    settings = default_settings(576)
    line = LoraChoice(settings, "given", "settings given by the user", settings).describe()
    assert line.startswith("LoRA configuration: given settings (the meta-LLM is not asked): rank ")
    assert "recommend" not in line and f"batch {settings.batch_size}" in line


def _record(adapter_id):
    return AdapterRecord(adapter_id, 0, "hash", "data", "adapter", "adapter.gguf", "meta-LLM")


def test_registry_moves_the_pointer_only_on_keep(tmp_path):
    reg = SpecialistRegistry.load("crafter", tmp_path)
    assert reg.champion is None and reg.next_id() == "a1"
    reg.add(_record("a1"))
    reg.save()
    reg = SpecialistRegistry.load("crafter", tmp_path)
    assert reg.pending().id == "a1"
    reg.record_verdict("a1", False, "tie", {})
    assert reg.champion is None and reg.pending() is None
    reg.add(_record("a2"))
    reg.record_verdict("a2", True, "win", {"mean_difference": 2.0})
    reg.save()
    reg = SpecialistRegistry.load("crafter", tmp_path)
    assert reg.champion == "a2" and reg.record("a1").decision == "rolled_back"
    with pytest.raises(RegistryError, match="already decided"):
        reg.record_verdict("a2", True, "again", {})
    (tmp_path / "crafter.json").write_text("{not json")
    with pytest.raises(RegistryError, match="restore it"):
        SpecialistRegistry.load("crafter", tmp_path)


def _batch(folder, progression_by_seed: dict[int, float]) -> BatchSummary:
    """A batch of these progressions in ``folder``, whose batch.json records one identity for all."""
    folder.mkdir()
    identity = {"game": "crafter", "roles": {"game": {"model": "m"}}, "digest": "d"}
    (folder / "batch.json").write_text(json.dumps({"game": "crafter", "identity": identity}))
    episodes = [EpisodeSummary(f"crafter__seed{s}", s, 10, p, 0.0, 1.0, 10) for s, p in progression_by_seed.items()]
    return BatchSummary(str(folder), "crafter", episodes, None, None, identity=identity)


def test_both_loops_gate_on_a_win_over_the_same_seeds(tmp_path):
    higher = GatePolicy("higher_mean")
    win = paired_verdict(_batch(tmp_path / "a", {42: 0.2, 43: 0.2}), _batch(tmp_path / "b", {42: 0.0, 43: 0.1}),
                        "specialist", higher)
    assert win.keep and win.reason.startswith("kept")
    tie = paired_verdict(_batch(tmp_path / "c", {42: 0.1, 43: 0.0}), _batch(tmp_path / "d", {42: 0.0, 43: 0.1}),
                        "candidate", higher)
    assert tie.outcome == "inconclusive" and "inside the noise floor" in tie.reason
    # The default gate decides nothing on 2 seeds, and says how many a 5-point gain needs.
    few = paired_verdict(_batch(tmp_path / "g", {42: 0.2, 43: 0.1}), _batch(tmp_path / "h", {42: 0.0, 43: 0.1}),
                        "specialist")
    assert few.outcome == "inconclusive" and "paired seeds would detect a 5-point gain" in few.reason
    with pytest.raises(RoundError, match=r"specialist seeds \[42\] and champion seeds \[42, 43\] differ: rerun"):
        paired_verdict(_batch(tmp_path / "e", {42: 0.5}), _batch(tmp_path / "f", {42: 0.0, 43: 0.0}), "specialist")


def test_two_model_endpoints():
    embedded = EndpointsConfig(game=EndpointConfig(name="game"))
    config, lora = specialist_endpoints(embedded, _record("a1"), "crafter")
    assert config.two_model and config.memory.lora_id == 0 and config.memory.name == "memory"
    assert [str(p) for p in lora] == ["adapter.gguf"]
    served = EndpointsConfig(game=EndpointConfig(name="game", base_url="http://127.0.0.1:8000/v1"),
                             memory=EndpointConfig(name="memory", base_url="http://127.0.0.1:8000/v1", model="specialist"))
    with pytest.raises(RoundError, match="not a peft adapter folder"):  # as given only when it proves to serve it
        specialist_endpoints(served, _record("a1"), "crafter")           # (tests/contract/test_server_rules.py)
    remote = EndpointsConfig(game=EndpointConfig(name="game", base_url="http://127.0.0.1:8000/v1"))
    with pytest.raises(RoundError, match="add a `memory:` endpoint"):
        specialist_endpoints(remote, _record("a1"), "crafter")


def test_training_seeds_avoid_evaluation_and_diagnosis_seeds(tmp_path):
    storage = Storage(runs=tmp_path / "runs", specialists=tmp_path / "specialists")
    settings = ProficiencyConfig(budget=ProficiencyBudget(rollout_episodes=20)).for_game("crafter")
    seeds = start_proficiency_round(settings, storage).seeds
    assert len(set(seeds)) == 20 and not set(seeds) & set(eval_seeds("crafter"))
    assert not set(seeds) & set(round_seeds("structure", "crafter", 20, storage))
    reg = SpecialistRegistry.load("crafter", storage.specialists)
    reg.add(_record("a1"))
    reg.save()
    assert not set(round_seeds("proficiency", "crafter", 20, storage)) & set(seeds)   # the next adapter: fresh seeds
