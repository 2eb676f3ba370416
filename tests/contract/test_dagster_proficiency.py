"""A proficiency round materialized in process on real Crafter with scripted models
(tests/proficiency_round_rules.py) that stops at curation, before any training."""

import dagster as dg
from builders import metadata
from proficiency_round_rules import GAME_RULES, META_RULES, ROUND, proficiency_resources, round_config

from automem_dagster.loop.proficiency import registry

resources = proficiency_resources


def test_too_small_a_dataset_stops_the_round_before_training(tmp_path, storage, scripted, resources):
    """The round stops at curation as designed: the run succeeds, training and evaluation are skipped, and
    an observation of the dataset says why (no step failure, so no stack trace in the run's log); a replay
    budget of 4 decisions still replays them first (about a second on the stand-in)."""
    server = scripted(META_RULES + GAME_RULES)
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))
    result = dg.materialize(ROUND, partition_key="crafter", resources=resources(server), instance=instance,
                            run_config=round_config(curation={"min_examples": 10_000, "replay": {"decisions": 4}}),
                            raise_on_error=False)

    assert result.success
    assert not [e for e in result.all_events if e.is_step_failure]
    assert metadata(result, "training_rollouts")["episodes"] == 4
    [observed] = [e.event_specific_data.asset_observation for e in result.all_events
                  if e.event_type_value == "ASSET_OBSERVATION"]
    reason = observed.metadata["reason"].value
    assert observed.metadata["outcome"].value == "dataset_too_small"
    assert "fewer than the minimum of 10000" in reason and "decisions.jsonl" in reason
    assert observed.metadata["examples"].value < 10_000
    assert observed.metadata["calibration"].value.startswith("4 decisions replayed: ")
    replay = observed.metadata["replay"].value       # the budget left the other eligible decisions unmeasured
    assert replay.startswith("4 eligible decisions replayed") and "the replay budget of 4 decisions was spent" in replay
    assert not result.asset_materializations_for_node("sft_dataset")
    assert not result.asset_materializations_for_node("lora_adapter")
    assert registry(storage.storage(), "crafter").adapters == []
