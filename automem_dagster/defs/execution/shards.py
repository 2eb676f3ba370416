"""Seed shards as Dagster steps: a batch asset fans out into one step per shard and merges them.

Every asset that plays episodes (``rollout_batch``, ``candidate_evaluation``, ``training_rollouts``,
``specialist_evaluation``) is a small graph, ``<asset>_plan`` -> ``<asset>_shard`` (mapped, one step
per shard) -> ``<asset>_merge``, shown in the asset graph as one asset. The plan names the batches
the asset plays (its *arms*: the candidate and the champion of an evaluation, the one batch of a
rollout) and splits each arm's seeds into ``shards`` shards. With the multiprocess, Celery or
Kubernetes executor each shard step is its own process or pod; a shard that fails
is retried on its own (``SHARD_RETRY``) and resumes where its batch stopped, and "re-execute from
failure" reruns only the failed shards. The plan passes each shard step a ``plans.values.Shard``
(its batch's spec as ``rollout.shards.spec_record``), so the steps share nothing but the project's storage.

Each merged batch says where its shards were played: ``shards.json`` lists, per shard played in the
run, its seeds and the host and process id of the step that finished it (a Celery worker's pool
process, a pod, or the run's own process in process); no other file of the batch depends on it.
"""

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dagster as dg

from automem_dagster.atomic import write_json_atomic
from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.execution.celery import queue_tags
from automem_dagster.defs.metadata.rounds import rollout_metadata
from automem_dagster.defs.plans.values import Resumed, Shard
from automem_dagster.defs.resources import LLMEndpointsResource, StorageResource
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.llm.session import Clients, endpoint_facts, session_roles
from automem_dagster.loop.serving import one_model
from automem_dagster.loop.storage import Storage
from automem_dagster.rollout import BatchSummary, RolloutSpec
from automem_dagster.rollout.runner import Progress
from automem_dagster.rollout.shards import (
    merge_shards,
    plan_shards,
    played_without_server,
    run_shard,
    spec_from_record,
    spec_record,
)

PLAYED_IN = "shards.json"
"""The file of a merged batch that says where its shards were played (``merge_arms``)."""
SHARD_RETRY = dg.RetryPolicy(max_retries=3, delay=10, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)
"""A shard resumes (its finished episodes are kept), so a retry after a server hiccup or a lost worker
only replays its unfinished episodes; 10, 20, 40 s lets a server recover."""

GAME_ENDPOINT_POOL = "game_endpoint"
"""The concurrency pool of every step that plays episodes (deploy/dagster.yaml sets its limit)."""


@dataclass(frozen=True)
class Arm:
    """One batch an asset plays: ``name`` keys its shard steps (``candidate_0``); ``one_model`` plays it
    with the memory role removed (the one-model champion beside the two-model agent)."""

    name: str
    spec: RolloutSpec
    one_model: bool = False


@dataclass
class Connection:
    """How a shard step connects: the endpoints file as it is, unless an asset's shards need other
    endpoints (the two-model agent's, with the adapters the embedded server loads) and a check that
    the connected servers are the right ones before a turn is played."""

    config: EndpointsConfig | None = None
    lora: list[Path] = field(default_factory=list)
    two_model: bool = False
    check: Callable[[Clients], None] | None = None


def skipped_plan(context: dg.OpExecutionContext, resumes: Resumed):
    """A round's plan outputs when it plays nothing because it ``resumes`` an earlier round's challenger (as
    the round's start decided, once): the plan is ``resumes``, and one empty shard lets the merge step run,
    which passes it on (``plans.values.resumed``)."""
    context.log.info(resumes.reason)
    yield dg.Output(resumes, "plan")
    yield from shard_outputs([])


def shard_outputs(arms: list[Arm], config: RoundConfig | None = None, adapter: str | None = None,
                  champion_adapter: str | None = None, output_name: str = "shards"):
    """One ``DynamicOutput`` per shard of each arm's seeds (split as ``config.shard_plan`` says), each a
    ``Shard`` carrying the ``adapter`` under evaluation and the ``champion_adapter`` in service (what the shard
    step's connection needs), the arms' shards alternating so an executor that
    runs them in order plays a candidate's seeds beside its champion's (``shard_size`` 1: episode by
    episode). A plan with nothing to play (no arms) still
    yields one empty shard, so the merge step always runs and can say why nothing was played."""
    if not arms:
        yield dg.DynamicOutput(Shard(None, 0, ()), mapping_key="nothing", output_name=output_name)
        return
    planned = [(arm, plan_shards(arm.spec.seeds, **config.shard_plan())) for arm in arms]
    for index in range(max(len(shards) for _, shards in planned)):  # the arms' shards alternate (interleaved play)
        for arm, shards in planned:
            if index < len(shards):
                yield dg.DynamicOutput(Shard(arm.name, index, tuple(shards[index]), spec_record(arm.spec),
                                             arm.one_model, adapter, champion_adapter),
                                       mapping_key=f"{arm.name}_{index}", output_name=output_name)


def episode_log(log) -> Progress:
    """A ``Progress`` callback that logs each finished episode of a shard (``log`` is ``context.log``)."""

    def progress(episode: str, steps: int, finished: bool) -> None:
        if finished:
            log.info(f"{episode}: finished after {steps} steps")

    return progress


def shard_op(name: str, connection: Callable[[Shard, LLMEndpointsResource, Storage], Connection] | None = None):
    """The mapped step that plays one shard of a batch, connected as ``connection(shard, endpoints,
    storage)`` says (default: the endpoints file); returns the shard with the endpoints it was played on."""

    @dg.op(name=name, retry_policy=SHARD_RETRY, pool=GAME_ENDPOINT_POOL,
           tags={"kind": "llm", **queue_tags(GAME_ENDPOINT_POOL)})
    def play_shard(context: dg.OpExecutionContext, endpoints: LLMEndpointsResource, storage: StorageResource,
                   shard: Shard) -> Shard:
        if shard.spec is None:
            return shard
        store = storage.storage()
        spec = spec_from_record(shard.spec, store.scaffolds)
        how = connection(shard, endpoints, store) if connection else Connection()
        config = how.config or endpoints.config()
        roles = session_roles(config, how.two_model)
        playing = {r: cfg for r, cfg in roles.items() if r != "memory" or not shard.one_model}
        if played_without_server(spec, list(shard.seeds), playing, how.lora):
            context.log.info(f"{shard.arm} shard {shard.index}: seeds {list(shard.seeds)} are in {spec.out_dir}, "
                             "played by these embedded endpoints and settings; nothing to play, no server started")
            facts = {r: endpoint_facts(r, cfg, cfg.base_url) for r, cfg in roles.items()}
            rules = {"meta": config.rules_meta.facts()} if config.rules_meta else {}
            return replace(shard, endpoints={**facts, **rules})
        context.log.info(f"{shard.arm} shard {shard.index}: seeds {list(shard.seeds)} of {spec.out_dir}")

        async def play(clients: Clients) -> dict:
            if how.check:
                how.check(clients)
            await run_shard(spec, shard.index, list(shard.seeds), one_model(clients) if shard.one_model else clients,
                            episode_log(context.log))
            return clients.describe()

        described = endpoints.run(play, store.runs / "logs", how.config, how.lora or None, how.two_model)
        return replace(shard, endpoints=described, played_in={"host": socket.gethostname(), "pid": os.getpid()})

    return play_shard


def merge_arms(store: Storage, played: list[Shard]) -> tuple[dict[str, BatchSummary], dict]:
    """Each arm's shards merged into its batch (what one process playing it would have left), by arm
    name, and the endpoints the shards were played on."""
    by_arm: dict[str, list[Shard]] = {}
    for shard in sorted(played, key=lambda s: s.index):
        if shard.arm is not None:
            by_arm.setdefault(shard.arm, []).append(shard)
    batches = {arm: merge_shards(spec_from_record(shards[0].spec, store.scaffolds), [list(s.seeds) for s in shards])
               for arm, shards in by_arm.items()}
    for arm, shards in by_arm.items():
        played_here = [{"index": s.index, "seeds": list(s.seeds), **s.played_in} for s in shards if s.played_in]
        if played_here:  # a rerun whose shards were all merged before played nothing: the record stays
            write_json_atomic(Path(batches[arm].out_dir) / PLAYED_IN, {"shards": played_here})
    return batches, next((s.endpoints for s in played if s.endpoints), {})


def batch_merge_op(name: str) -> dg.OpDefinition:
    """The fan-in of a one-batch asset (rollouts): the batch directory, or, when its plan skipped
    (``skipped_plan``), the ``Resumed`` it passes on; a played plan is a ``PlayPlan``."""

    @dg.op(name=name)
    def merge(context: dg.OpExecutionContext, storage: StorageResource, plan: Any, played: list[Shard]) -> dg.Output:
        if isinstance(plan, Resumed):
            return dg.Output(plan, metadata={"outcome": "skipped", "reason": plan.reason})
        [summary] = merge_arms(storage.storage(), played)[0].values()
        context.log.info(f"progression {summary.progression}: {summary.out_dir}")
        return dg.Output(summary.out_dir, metadata={**rollout_metadata(summary, plan.version, list(plan.seeds)),
                                                    "shards": len(played)})

    return merge


def plan_config(plan: str, config_type: type[RoundConfig]) -> dg.ConfigMapping:
    """The launchpad shows the round's settings (``config_type``) on the asset, not on each of its
    steps: they go to the ``plan`` step, which decides everything the shards and the merge do."""
    return dg.ConfigMapping(config_fn=lambda config: {plan: {"config": config}},
                            config_schema=config_type.to_config_schema())


def fan_out(plan: dg.OpDefinition, shard: dg.OpDefinition, merge: dg.OpDefinition, **inputs):
    """Inside a ``graph_asset``: plan (given the graph's ``inputs`` by name) -> one ``shard`` step per planned
    shard -> merge."""
    decided, shards = plan(**inputs)
    return merge(decided, shards.map(shard).collect())
