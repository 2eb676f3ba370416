"""Each loop's round is described once (``loop/round_plan.py``) and every driver follows that description.

Dagster: each step is an asset whose upstream steps are exactly the ones the plan says it reads, and
the jobs select the plan's steps (the round, the decision, the whole plan the CLI runs). DVC: every
stage of ``dvc.yaml`` runs steps of one plan (one, or two in a row), in the plan's order, and reads
only what those steps read,
apart from the sharing the pipeline documents (its proficiency round curates the structure round's rollout).
"""

from pathlib import Path

import dagster as dg
import pytest
import yaml

from automem_dagster.defs import defs
from automem_dagster.loop.round_plan import PROFICIENCY_ROUND, STRUCTURE_ROUND, RoundPlan

PLANS = {"structure": STRUCTURE_ROUND, "proficiency": PROFICIENCY_ROUND}
JOBS = {"structure": ("structure_round_job", "promote_job", "structure_full_round_job"),
        "proficiency": ("proficiency_round_job", "promote_specialist_job", "proficiency_full_round_job")}
DVC_SHARED = {("curate", "rollout")}
"""DVC stages that read another loop's stage: dvc.yaml's proficiency round curates the structure round's
rollout (it has no training-rollout stage of its own). Each evaluate stage plays its own champion beside
its challenger, so no decision reads the other loop's evaluation."""


def asset_names(keys) -> set[str]:
    return {key.to_user_string() for key in keys}


@pytest.mark.parametrize("loop", PLANS)
def test_the_dagster_assets_are_the_plans_steps_reading_what_it_says(loop):
    plan, graph = PLANS[loop], defs.resolve_asset_graph()
    for step in plan.steps:
        parents = asset_names(graph.get(dg.AssetKey(step.name)).parent_keys) & set(plan.names)
        assert parents == set(step.reads), step.name
    round_job, promotion, whole = (defs.resolve_job_def(name) for name in JOBS[loop])
    assert asset_names(round_job.asset_layer.selected_asset_keys) == set(plan.round_steps)
    assert asset_names(promotion.asset_layer.selected_asset_keys) == {plan.decision}
    assert asset_names(whole.asset_layer.selected_asset_keys) == set(plan.names)


def dvc_stages() -> dict[str, dict]:
    return yaml.safe_load((Path(__file__).parents[3] / "dvc.yaml").read_text())["stages"]


def stage_steps() -> dict[str, tuple[RoundPlan, list[str]]]:
    """Each DVC stage named in a plan: the plan and the steps it runs (``finetune`` runs two in a row)."""
    named: dict[str, tuple[RoundPlan, list[str]]] = {}
    for plan in PLANS.values():
        for step in plan.steps:
            for stage in step.dvc:
                assert named.get(stage, (plan,))[0] is plan, f"{stage} is named by both loops"
                named.setdefault(stage, (plan, []))[1].append(step.name)
    return named


def test_every_dvc_stage_runs_steps_of_one_plan_in_order_reading_what_they_read():
    stages, named = dvc_stages(), stage_steps()
    assert set(stages) == set(named)
    made_by = {}
    for stage, spec in stages.items():
        for out in spec.get("outs", []):
            made_by[out if isinstance(out, str) else next(iter(out))] = stage
    order = list(stages)
    for stage, spec in stages.items():
        plan, steps = named[stage]
        indices = [plan.names.index(step) for step in steps]
        assert indices == list(range(indices[0], indices[0] + len(steps))), f"{stage} runs steps out of order"
        reads = {read for step in steps for read in plan.steps[plan.names.index(step)].reads} - set(steps)
        for upstream in {made_by[d] for d in spec.get("deps", []) if d in made_by}:
            upstream_plan, upstream_steps = named[upstream]
            if (stage, upstream) in DVC_SHARED:
                assert upstream_plan is not plan
                continue
            assert upstream_plan is plan and upstream_steps[-1] in reads, f"{stage} reads {upstream}"
            assert order.index(upstream) < order.index(stage)
