"""Dagster assets built from a round's plan (``loop/round_plan.py``): one asset per step, so the asset
graph is the plan's and adding a step is one edit to the plan plus its function.

Each asset is named after its step, reads exactly the assets of the steps it ``reads`` (and waits on
those it comes ``after``, without a value), carries the step's ``makes`` and stage function in its
description, and sits in the loop's group, partitioned by game. Two kinds of step:

- ``Body``: the asset runs one function, written as a Dagster asset function without its decorator
  (parameters ``context``, ``config``, the resources it uses, and the values of the steps it reads,
  by name): the step's stage function, called with what the step needs, and the metadata a person
  wants to see. A step with no body runs ``stage_body``: its stage function called with the values it
  reads, and ``settings``, ``storage`` or ``game`` where its parameters ask for them.
- ``Batch``: a step that ``plays`` a batch of episodes is the graph ``<step>_plan`` -> one
  ``<step>_shard`` step per seed shard -> ``<step>_merge`` (``defs/execution/shards.py``); only the plan
  (what to play) and the merge (what the value is) differ between steps.

Dagster-only facts (the kinds shown in the UI, the evaluation group the challengers' evaluations share)
stay here, beside the bodies; the plan holds what every driver shares.
"""

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.execution.partitions import game_of, game_partitions
from automem_dagster.defs.execution.shards import batch_merge_op, fan_out, plan_config, shard_op
from automem_dagster.defs.plans.values import Shard
from automem_dagster.defs.resources import StorageResource
from automem_dagster.loop.round_plan import RoundPlan, Step


@dataclass(frozen=True)
class Body:
    """A step run by one asset function ``run`` (None: ``stage_body``), shown with ``kinds``; ``group``
    replaces the loop's group."""

    run: Callable | None = None
    kinds: frozenset[str] = frozenset({"python"})
    group: str | None = None
    may_stop: bool = False
    """The step may end the round without a value, as designed (a dataset below the minimum): ``run`` is then a
    generator that yields its ``dg.Output`` only when there is one, and Dagster skips the steps after it."""


@dataclass(frozen=True)
class Batch:
    """A step that plays a batch of episodes in seed shards: ``plan`` is the ``<step>_plan`` op's function
    (it yields the ``plan`` value and the ``shards``), ``merge`` the ``<step>_merge`` op's (None: the one
    batch merged, ``batch_merge_op``), ``connection`` how a shard connects (None: the endpoints file)."""

    plan: Callable
    merge: Callable | None = None
    connection: Callable | None = None
    kinds: frozenset[str] = frozenset({"python", "llm"})
    group: str | None = None


@dataclass(frozen=True)
class Loop:
    """What every asset of a loop shares: its Dagster group (and the ``domain`` tag naming it) and its run
    config (the loop's options)."""

    group: str
    config: type[RoundConfig] = RoundConfig


def description(step: Step, run: Callable | None) -> str:
    """What the UI says of a step's asset: what it makes, the body's own account, the stage it runs."""
    doc = inspect.getdoc(run) if run is not None else None
    return "\n\n".join(filter(None, (step.makes[0].upper() + step.makes[1:] + ".", doc,
                                     f"Stage: `{step.stage_name}`; writes {step.writes}.")))


def _check_reads(step: Step, run: Callable) -> None:
    """A body must take the value of every step its step reads: a plan edit the body missed is an error here."""
    missing = set(step.reads) - set(inspect.signature(run).parameters)
    if missing:
        raise ValueError(f"step {step.name}: its function {run.__name__} takes no parameter for {sorted(missing)}, "
                         "which the plan says it reads; add them (named after the steps) or fix Step.reads")


def stage_body(step: Step, config_type: type[RoundConfig]) -> Callable:
    """The body of a step without one: its stage function called with the values of the steps it reads and,
    where its parameters name them, the round's ``settings``, the ``storage`` and the ``game`` (an async stage
    runs on a fresh event loop); its return value is the step's value. A stage that needs more (clients, a
    scaffold loaded from a batch) gets a ``Body`` of its own."""
    offered = {"settings", "storage", "game", *step.reads}
    params = inspect.signature(step.stage).parameters
    unknown = [n for n, p in params.items() if n not in offered and p.default is inspect.Parameter.empty]
    if unknown:
        raise ValueError(f"step {step.name}: its stage {step.stage_name} needs {unknown}, which a step without a "
                         f"body cannot give (it offers {sorted(offered)}); give the step a Body")

    def run(context: dg.AssetExecutionContext, config: config_type, storage: StorageResource, **inputs):
        game = game_of(context.partition_key)
        given = {**inputs, "settings": config.for_game(game), "storage": storage.storage(), "game": game}
        value = step.stage(**{name: given[name] for name in params if name in given})
        return asyncio.run(value) if inspect.isawaitable(value) else value

    return run


def step_asset(step: Step, body: Body, loop: Loop) -> dg.AssetsDefinition:
    """The asset of a step run by one function (``Body``)."""
    if body.run is not None:
        _check_reads(step, body.run)
    run = body.run or stage_body(step, loop.config)
    return dg.asset(name=step.name, ins={read: dg.AssetIn(read) for read in step.reads}, deps=list(step.after),
                    description=description(step, body.run), group_name=body.group or loop.group,
                    partitions_def=game_partitions, kinds=set(body.kinds), tags={"domain": body.group or loop.group},
                    output_required=not body.may_stop)(run)


def batch_asset(step: Step, batch: Batch, loop: Loop) -> dg.AssetsDefinition:
    """The asset of a step that plays a batch: ``<step>_plan`` -> ``<step>_shard`` per shard -> ``<step>_merge``,
    shown as one asset; the round's options go to the plan step (``plan_config``)."""
    _check_reads(step, batch.plan)
    plan = dg.op(name=f"{step.name}_plan", ins={after: dg.In(dg.Nothing) for after in step.after},
                 out={"plan": dg.Out(), "shards": dg.DynamicOut(Shard)})(batch.plan)
    merge = dg.op(name=f"{step.name}_merge")(batch.merge) if batch.merge else batch_merge_op(f"{step.name}_merge")
    shard = shard_op(f"{step.name}_shard", batch.connection)

    def compose(**inputs):
        return fan_out(plan, shard, merge, **inputs)

    # The graph's inputs are the step's, by name: Dagster reads them from the function's signature.
    names = (*step.reads, *step.after)
    compose.__signature__ = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names])
    ins = {**{read: dg.AssetIn(read) for read in step.reads},
           **{after: dg.AssetIn(after, dagster_type=dg.Nothing) for after in step.after}}
    return dg.graph_asset(name=step.name, ins=ins, description=description(step, batch.plan),
                          group_name=batch.group or loop.group, partitions_def=game_partitions, kinds=set(batch.kinds),
                          tags={"domain": batch.group or loop.group},
                          config=plan_config(f"{step.name}_plan", loop.config))(compose)


def plan_assets(plan: RoundPlan, steps: dict[str, Body | Batch], loop: Loop) -> dict[str, dg.AssetsDefinition]:
    """Every step's asset, by step name, in the plan's order: a ``Batch`` for a step that plays episodes, its
    ``Body`` (or none: ``stage_body``) for the others. ``steps`` naming a step the plan lacks is an error."""
    unknown = set(steps) - set(plan.names)
    if unknown:
        raise ValueError(f"{plan.loop} round: bodies for {sorted(unknown)}, which are no steps of its plan")
    built = {}
    for step in plan.steps:
        body = steps.get(step.name, Body())
        if step.plays != isinstance(body, Batch):
            raise ValueError(f"step {step.name}: {'plays' if step.plays else 'plays no'} episodes in the plan, so "
                             f"it needs {'a Batch' if step.plays else 'a Body'}")
        built[step.name] = batch_asset(step, body, loop) if step.plays else step_asset(step, body, loop)
    return built
