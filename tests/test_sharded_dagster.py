"""A sharded rollout_batch under Dagster's multiprocess executor: shards in their own processes,
a failed shard and a killed one each retried on their own, the killed one resuming mid-episode,
and the merged batch equal to one process playing every seed.

The job is rebuilt in each step process (``dg.build_reconstructable_job``); where the project's files and the
scripted endpoint are comes through environment variables, which the step processes inherit.
"""

import asyncio
import os
import shutil
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
import yaml
from batch_content import batch_content
from builders import endpoints_file

from automem_dagster.defs.common.resources import LLMEndpointsResource, MlflowResource, StorageResource
from automem_dagster.defs.structure.assets import rollout_batch
from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.llm.session import connect
from automem_dagster.loop.settings import RoundSettings
from automem_dagster.loop.structure import rollout_spec, start_round
from automem_dagster.rollout import episode_id, run_batch
from automem_dagster.rollout.shards import plan_shards, shard_dir
from automem_dagster.rollout.trajectory import trajectory_path

RULES = [
    {"match": "Phase: LOG", "reply": "<|DONE|>"},
    {"match": "Step 2. Your previous action", "reply": "<|ACTION|>do<|END|>"},
    # Step 4's action comes slowly (the same action as every other step's), so the first shard's
    # process is still in the middle of its episodes when the test kills it after their step 3.
    {"match": "Step 4. Your previous action", "reply": "<|ACTION|>move_left<|END|>", "delay_s": 3},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>move_left<|END|>"},
]
FAIL_ONCE = {"match": "Step 3. Your previous action", "status": 500, "times": 1}
"""One request of one episode fails: exactly one shard step fails, and its retry must finish it."""
EPISODES, STEPS = 4, 5
KILLED = "rollout_batch.rollout_batch_shard[rollout_0]"
ENV = "AUTOMEM_TEST_SHARDED"


def sharded_rollout_job():
    """The rollout asset alone, under the multiprocess executor, on the files named in $AUTOMEM_TEST_SHARDED."""
    paths = yaml.safe_load(os.environ[ENV])
    resources = {"endpoints": LLMEndpointsResource(endpoints_file=paths["endpoints"]),
                 "storage": StorageResource(runs=paths["runs"], scaffolds=paths["scaffolds"], lineage=paths["lineage"],
                                            specialists=paths["specialists"]),
                 "mlflow": MlflowResource(tracking_uri=paths["mlflow"])}
    job = dg.define_asset_job("sharded_rollout", selection=[rollout_batch],
                              executor_def=dg.multiprocess_executor.configured({"max_concurrent": 2}))
    return dg.Definitions(assets=[rollout_batch], jobs=[job], resources=resources).resolve_job_def("sharded_rollout")


def _kill_first_shard_mid_episode(instance: dg.DagsterInstance, shard: Path, killed: list[int]) -> None:
    """SIGKILL the first shard's step process once one of its episodes has recorded 3 steps (as a lost
    pod or an out-of-memory kill would end it), its process found by the step's start event."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(_recorded_steps(partial) >= 3 for partial in shard.glob("trajectories/*.jsonl.partial")):
            pid = _running_attempt(instance)
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
                except ProcessLookupError:                   # that attempt had just ended: wait for the next
                    pass
        time.sleep(0.05)


def _running_attempt(instance: dg.DagsterInstance) -> int | None:
    """The process of the first shard's attempt now running (the 500 may have ended an earlier one)."""
    running = None
    for run in instance.get_runs():
        for entry in instance.all_logs(run.run_id):
            event = entry.dagster_event
            if event is None or entry.step_key != KILLED:
                continue
            if event.event_type in (dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_RESTARTED):
                running = event.pid
            elif event.event_type in (dg.DagsterEventType.STEP_UP_FOR_RETRY, dg.DagsterEventType.STEP_FAILURE,
                                      dg.DagsterEventType.STEP_SUCCESS):
                running = None
    return running


def _recorded_steps(partial: Path) -> int:
    try:
        return partial.read_text().count('"type": "step"')
    except FileNotFoundError:                                # the episode finished: renamed meanwhile
        return 0


def _endpoints(tmp_path, server):
    return endpoints_file(tmp_path / "endpoints.yaml", server, ("game",), max_retries=0)


@pytest.mark.integration
def test_shards_in_their_own_processes_merge_into_the_one_process_batch(tmp_path, storage, scripted, monkeypatch):
    clean_storage = StorageResource(runs=str(tmp_path / "clean-runs"), scaffolds=str(tmp_path / "clean-scaffolds"),
                                    lineage=str(tmp_path / "clean-lineage"), specialists=str(tmp_path / "clean-specialists"))
    shutil.copytree(storage.scaffolds, clean_storage.scaffolds)
    server = scripted([FAIL_ONCE, *RULES])
    monkeypatch.setenv(ENV, yaml.safe_dump({
        "endpoints": str(_endpoints(tmp_path, server)), "runs": storage.runs,
        "scaffolds": storage.scaffolds, "lineage": storage.lineage, "specialists": storage.specialists,
        "mlflow": f"sqlite:///{tmp_path}/mlflow.db"}))
    run_config = {"ops": {"rollout_batch": {"config": {"rollout_episodes": EPISODES, "rollout_max_steps": STEPS,
                                                       "concurrency": 2, "shards": 2}}}}
    settings = RoundSettings("crafter", EPISODES, STEPS, STEPS, 2, 2, 3)
    start = start_round(settings, storage.storage())
    first_shard = shard_dir(rollout_spec(settings, start.scaffold, start.seeds, storage.storage()).out_dir, 0)
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        killed: list[int] = []
        killer = threading.Thread(target=_kill_first_shard_mid_episode, args=(instance, first_shard, killed))
        killer.start()
        # Step processes import this module by name from tests/, as pytest did.
        job = dg.build_reconstructable_job(__name__, "sharded_rollout_job",
                                           reconstructor_working_directory=os.path.dirname(__file__))
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
