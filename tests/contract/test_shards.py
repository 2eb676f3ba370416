"""Seed shards: played apart, merged into the batch one process would have written."""

import asyncio
import shutil

import pytest
from batch_content import batch_content

from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.llm.session import connect
from automem_dagster.rollout import RolloutError, RolloutSpec, run_batch
from automem_dagster.rollout.shards import merge_shards, plan_shards, run_shard, shard_dir
from automem_dagster.scaffold import load_scaffold

# Replies depend only on the request, so a shard gets the replies one process would.
RULES = [
    {"match": "Phase: LOG", "reply": "<|APPEND|>actions_log.txt|moved\n<|DONE|>"},
    {"match": "Step 3. Your previous action", "reply": "<|ACTION|>north<|END|>"},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>east<|END|>"},
]
GAME, SEEDS, STEPS = "minihack:Corridor-R3", [11, 12, 13, 14, 15], 6


def _spec(out):
    return RolloutSpec(game=GAME, scaffold=load_scaffold("minihack", 0), seeds=SEEDS, max_steps=STEPS, out_dir=out,
                       concurrency=2)


def _play(server, tmp_path, work):
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url=server.base_url, model="scripted",
                                                 constrained="none", max_retries=0))

    async def go():
        async with connect(config, tmp_path / "logs") as clients:
            return await work(clients)

    return asyncio.run(go())


def test_merged_shards_equal_the_one_process_batch(tmp_path, scripted):
    server = scripted(RULES)
    whole, sharded = tmp_path / "whole", tmp_path / "sharded"
    _play(server, tmp_path, lambda clients: run_batch(_spec(whole), clients))
    shards = plan_shards(SEEDS, shard_count=2)

    async def shards_then_merge(clients):
        for index, seeds in enumerate(shards):
            await run_shard(_spec(sharded), index, seeds, clients)
        return merge_shards(_spec(sharded), shards)

    summary = _play(server, tmp_path, shards_then_merge)
    assert [e.seed for e in summary.episodes] == SEEDS
    assert batch_content(sharded) == batch_content(whole)
    assert not (sharded / "shards").exists()


def test_a_missing_shard_is_named_and_a_rerun_plays_only_what_is_missing(tmp_path, scripted):
    server = scripted(RULES)
    batch = tmp_path / "batch"
    shards = plan_shards(SEEDS, shard_size=2)
    _play(server, tmp_path, lambda clients: run_shard(_spec(batch), 0, shards[0], clients))
    _play(server, tmp_path, lambda clients: run_shard(_spec(batch), 2, shards[2], clients))
    with pytest.raises(RolloutError, match=r"rerun shard 1 \(seeds \[13, 14\]\)"):
        merge_shards(_spec(batch), shards)
    # The finished shards were merged; playing them again costs no model call.
    requests = len(server.request_log.read_text().splitlines())
    assert _play(server, tmp_path, lambda clients: run_shard(_spec(batch), 0, shards[0], clients)) is None
    assert len(server.request_log.read_text().splitlines()) == requests
    _play(server, tmp_path, lambda clients: run_shard(_spec(batch), 1, shards[1], clients))
    assert [e.seed for e in merge_shards(_spec(batch), shards).episodes] == SEEDS


def test_a_shard_played_with_other_settings_is_refused(tmp_path, scripted):
    server = scripted(RULES)
    batch = tmp_path / "batch"
    shards = plan_shards(SEEDS, shard_count=2)
    _play(server, tmp_path, lambda clients: run_shard(_spec(batch), 0, shards[0], clients))
    other = RolloutSpec(game=GAME, scaffold=load_scaffold("minihack", 0), seeds=SEEDS, max_steps=STEPS + 1,
                        out_dir=batch)
    _play(server, tmp_path, lambda clients: run_shard(other, 1, shards[1], clients))
    with pytest.raises(RolloutError, match="shard 1 was played with other max_steps"):
        merge_shards(_spec(batch), shards)
    shutil.rmtree(shard_dir(batch, 1))
    _play(server, tmp_path, lambda clients: run_shard(_spec(batch), 1, shards[1], clients))
    assert len(merge_shards(_spec(batch), shards).episodes) == len(SEEDS)
