"""Seed shards as Dagster steps: a batch asset fans out into one step per shard and merges them.

A batch asset becomes a small graph, ``<asset>_plan`` -> ``<asset>_shard`` (mapped, one step per
shard) -> ``<asset>_merge``, shown in the asset graph as one asset. With the multiprocess,
Kubernetes, Celery or Docker executor each shard step is its own process, container or pod; a
shard that fails is retried on its own (``SHARD_RETRY``) and resumes where its batch stopped, and
"re-execute from failure" reruns only the failed shards. The plan passes plain data (the batch's
spec as ``rollout.shards.spec_record``), so the steps share nothing but the project's storage.
"""


import dagster as dg

from automem_dagster.defs.common.progress import episode_log
from automem_dagster.defs.common.resources import LLMEndpointsResource, StorageResource
from automem_dagster.rollout import RolloutSpec
from automem_dagster.rollout.shards import plan_shards, run_shard, spec_from_record, spec_record

SHARD_RETRY = dg.RetryPolicy(max_retries=3, delay=10, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)
"""A shard resumes (its finished episodes are kept), so a retry after a server hiccup or a lost worker
only replays its unfinished episodes; 10, 20, 40 s lets a server recover."""

GAME_ENDPOINT_POOL = "game_endpoint"
"""The concurrency pool of every step that plays episodes (deploy/dagster.yaml sets its limit)."""


def shard_outputs(spec: RolloutSpec | None, shards: int, output_name: str = "shards"):
    """One ``DynamicOutput`` per shard of ``spec``'s seeds; a round with nothing to play (``None``)
    still yields one empty shard, so the merge step always runs and can say why nothing was played."""
    if spec is None:
        yield dg.DynamicOutput({"index": 0, "seeds": [], "spec": None}, mapping_key="nothing", output_name=output_name)
        return
    for index, seeds in enumerate(plan_shards(spec.seeds, shard_count=shards)):
        yield dg.DynamicOutput({"index": index, "seeds": seeds, "spec": spec_record(spec)}, mapping_key=f"shard_{index}",
                               output_name=output_name)


def shard_op(name: str) -> dg.OpDefinition:
    """The mapped step that plays one shard of a batch; returns the shard's (index, seeds)."""

    @dg.op(name=name, retry_policy=SHARD_RETRY, pool=GAME_ENDPOINT_POOL, tags={"kind": "llm"})
    def play_shard(context: dg.OpExecutionContext, endpoints: LLMEndpointsResource, storage: StorageResource,
                   shard: dict) -> dict:
        if shard["spec"] is None:
            return shard
        store = storage.storage()
        spec = spec_from_record(shard["spec"], store.scaffolds)
        context.log.info(f"shard {shard['index']}: seeds {shard['seeds']} of {spec.out_dir}")
        endpoints.run(lambda clients: run_shard(spec, shard["index"], shard["seeds"], clients, episode_log(context.log)),
                      store.runs / "logs")
        return shard

    return play_shard


def planned_shards(played: list[dict]) -> list[list[int]]:
    """The shards' seed lists in plan order, from what the shard steps returned (collected in any order)."""
    return [shard["seeds"] for shard in sorted(played, key=lambda s: s["index"])]
