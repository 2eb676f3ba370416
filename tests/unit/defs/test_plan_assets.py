"""The Dagster assets are built from the round's plan (``defs/plans/assets.py``): a step added to a
plan becomes an asset reading what the step reads, with no other edit (issue 43, point 2)."""

from dataclasses import replace

import dagster as dg
import pytest

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.plans.assets import Batch, Body, Loop, plan_assets
from automem_dagster.defs.plans.challenger import round_job
from automem_dagster.defs.resources import StorageResource, default_resources
from automem_dagster.defs.structure.assets import BODIES, GROUP
from automem_dagster.loop.round_plan import STRUCTURE_ROUND, RoundPlan, Step
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import Storage
from automem_dagster.options import Budget


def seed_list(settings: StructureConfig, storage: Storage) -> list[int]:
    """A test step's stage: the round's evaluation seeds."""
    return settings.eval_seed_list(storage.seeds_file)


def seed_count(eval_seeds: list[int], game: str) -> dict:
    """A test step's stage, reading the step before it by name."""
    return {"game": game, "seeds": len(eval_seeds)}


def note(diagnosis: str) -> str:
    """A step added to the structure round: a line on the diagnosis it reads."""
    return f"diagnosed in {diagnosis}"


def keys(names) -> set[str]:
    return {key.to_user_string() for key in names}


def test_a_step_inserted_in_the_structure_plan_is_an_asset_reading_what_it_reads_and_in_the_round_job():
    notes = Step("diagnosis_notes", ("diagnosis",), "a note on the diagnosis", stage=note, writes="nothing")
    steps = list(STRUCTURE_ROUND.steps)
    steps.insert(2, notes)
    steps[3] = replace(steps[3], reads=("diagnosis_notes",))  # the revision now reads the note
    plan = RoundPlan("structure", tuple(steps), STRUCTURE_ROUND.outcomes)
    assets = plan_assets(plan, {**BODIES, "scaffold_candidate": Body(lambda diagnosis_notes: None)}, Loop(GROUP))
    defs = dg.Definitions(assets=list(assets.values()), jobs=[round_job("local_round_job", plan, RoundConfig(), "")],
                          resources=default_resources())
    graph = defs.resolve_asset_graph()
    assert keys(graph.get(dg.AssetKey("diagnosis_notes")).parent_keys) == {"diagnosis"}
    assert keys(graph.get(dg.AssetKey("scaffold_candidate")).parent_keys) == {"diagnosis_notes"}
    assert "A note on the diagnosis." in assets["diagnosis_notes"].descriptions_by_key[dg.AssetKey("diagnosis_notes")]
    selected = defs.resolve_job_def("local_round_job")
    assert keys(selected.asset_layer.selected_asset_keys) == set(plan.round_steps) >= {"diagnosis_notes"}


def test_steps_without_a_body_run_their_stage_functions_with_the_values_they_read(tmp_path):
    plan = RoundPlan("structure", (
        Step("eval_seeds", (), "the evaluation seeds", stage=seed_list, writes="nothing"),
        Step("seed_count", ("eval_seeds",), "how many", stage=seed_count, writes="nothing"),
    ), {})
    assets = plan_assets(plan, {}, Loop(GROUP))
    result = dg.materialize(list(assets.values()), partition_key="crafter", resources={"storage": StorageResource()},
                            run_config={"ops": {name: {"config": {"budget": {"eval_episodes": 3}}} for name in plan.names}},
                            instance=dg.DagsterInstance.ephemeral())
    seeds = StructureConfig(budget=Budget(eval_episodes=3)).for_game("crafter").eval_seed_list(Storage().seeds_file)
    assert result.output_for_node("eval_seeds") == seeds
    assert result.output_for_node("seed_count") == {"game": "crafter", "seeds": 3}


def test_a_body_or_stage_that_does_not_match_its_step_is_refused_naming_the_step():
    reads = Step("count", ("eval_seeds",), "how many", stage=seed_count, writes="nothing")
    with pytest.raises(ValueError, match=r"step count: its function <lambda> takes no parameter for \['eval_seeds'\]"):
        plan_assets(RoundPlan("structure", (reads,), {}), {"count": Body(lambda seeds: None)}, Loop(GROUP))
    needs_clients = Step("ask", (), "a reply", stage=STRUCTURE_ROUND.step("diagnosis").stage, writes="nothing")
    with pytest.raises(ValueError, match=r"step ask: its stage loop.structure.diagnose_stage needs \['batch', "):
        plan_assets(RoundPlan("structure", (needs_clients,), {}), {}, Loop(GROUP))
    plays = replace(reads, plays=True, reads=())
    with pytest.raises(ValueError, match="step count: plays episodes in the plan, so it needs a Batch"):
        plan_assets(RoundPlan("structure", (plays,), {}), {}, Loop(GROUP))
    with pytest.raises(ValueError, match=r"bodies for \['nowhere'\], which are no steps"):
        plan_assets(RoundPlan("structure", (), {}), {"nowhere": Batch(seed_list)}, Loop(GROUP))
