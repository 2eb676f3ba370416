"""A sharded rollout_batch under Dagster's multiprocess executor: shards in their own processes,
a failed shard and a killed one each retried on their own, the killed one resuming mid-episode,
and the merged batch equal to one process playing every seed.

The job is rebuilt in each step process (``dg.build_reconstructable_job``); where the project's files and the
scripted endpoint are comes through environment variables, which the step processes inherit.
"""

import asyncio
import shutil
import threading
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
import yaml
from batch_content import batch_content
from sharded_rollouts import ENV, EPISODES, KILLED, RULES, STEPS, TESTS, kill_first_shard_mid_episode, rollout_endpoints

from automem_dagster.defs.resources import StorageResource
from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.llm.session import connect
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.structure import rollout_spec, start_round
from automem_dagster.options import Budget
from automem_dagster.rollout import episode_id, run_batch
from automem_dagster.rollout.shards import plan_shards, shard_dir
from automem_dagster.rollout.trajectory import trajectory_path

FAIL_ONCE = {"match": "Step 3. Your previous action", "status": 500, "times": 1}
"""One request of one episode fails: exactly one shard step fails, and its retry must finish it."""


@pytest.mark.integration
def test_shards_in_their_own_processes_merge_into_the_one_process_batch(tmp_path, storage, scripted, monkeypatch):
    clean_storage = StorageResource(runs=str(tmp_path / "clean-runs"), scaffolds=str(tmp_path / "clean-scaffolds"),
                                    lineage=str(tmp_path / "clean-lineage"), specialists=str(tmp_path / "clean-specialists"))
    shutil.copytree(storage.scaffolds, clean_storage.scaffolds)
    server = scripted([FAIL_ONCE, *RULES])
    monkeypatch.setenv(ENV, yaml.safe_dump({
        "endpoints": str(rollout_endpoints(tmp_path, server)), "runs": storage.runs,
        "scaffolds": storage.scaffolds, "lineage": storage.lineage, "specialists": storage.specialists,
        "mlflow": f"sqlite:///{tmp_path}/mlflow.db"}))
    budget = {"rollout_episodes": EPISODES, "rollout_max_steps": STEPS, "concurrency": 2}
    run_config = {"ops": {"rollout_batch": {"config": {"budget": budget, "shards": 2}}}}
    settings = StructureConfig(budget=Budget(rollout_episodes=EPISODES, rollout_max_steps=STEPS, eval_max_steps=STEPS,
                                             eval_episodes=2)).for_game("crafter")
    start = start_round(settings, storage.storage())
    first_shard = shard_dir(rollout_spec(settings, start.scaffold, start.seeds, storage.storage()).out_dir, 0)
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        killed: list[int] = []
        killer = threading.Thread(target=kill_first_shard_mid_episode, args=(instance, first_shard, killed))
        killer.start()
        # Step processes import the job's module by name from tests/, as pytest did.
        job = dg.build_reconstructable_job("sharded_rollouts", "sharded_rollout_job",
                                           reconstructor_working_directory=str(TESTS))
        with dg.execute_job(job, instance=instance, run_config=run_config,
                            tags={"dagster/partition": "crafter"}) as result:
            killer.join()
            assert result.success
            retries = Counter(e.step_key for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY")
            succeeded = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
            pids = {e.pid for e in result.all_events if e.step_key and "rollout_batch_shard" in e.step_key}
            crashed = [e.message for e in result.all_events if e.event_type_value == "ENGINE_EVENT"
                       and "child process for step" in (e.message or "")]
            [materialization] = result.asset_materializations_for_node("rollout_batch")
            batch = materialization.metadata["batch"].value
    shards = sorted(key for key in succeeded if "rollout_batch_shard" in key)
    # The kill and the HTTP 500 each cost a retry of the shard they hit, one retry for both when the 500
    # failed an episode of the first shard's attempt that was then killed (its other episode played on);
    # no other step reran.
    assert len(shards) == 2 and killed and retries[KILLED] >= 1 and sum(retries.values()) <= 2, retries
    assert set(retries) <= set(shards) and any(KILLED in message for message in crashed), crashed
    assert len(pids) >= 3                          # each shard step in a process of its own, the retry in another
    # The killed shard's retry resumed its episodes where they stopped instead of playing them again.
    first_seeds = plan_shards(start.seeds, shard_count=2)[0]
    assert all('"resumes"' in trajectory_path(Path(batch), episode_id("crafter", seed)).read_text()
               for seed in first_seeds)

    store = clean_storage.storage()
    seeds = start_round(settings, store).seeds
    # The same server (its one failure is spent), so the trajectories' endpoint records agree too.
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url=server.base_url, model="scripted",
                                                 constrained="none", max_retries=0))

    async def one_process():
        async with connect(config, tmp_path / "logs") as clients:
            return await run_batch(rollout_spec(settings, start_round(settings, store).scaffold, seeds, store), clients)

    whole = asyncio.run(one_process())
    assert batch_content(batch) == batch_content(whole.out_dir)
