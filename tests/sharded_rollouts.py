"""A sharded rollout_batch whose shards run in processes of their own (Dagster's multiprocess executor in
tests/e2e/test_sharded_dagster.py, Celery workers in tests/e2e/test_celery_executor.py and
test_celery_rounds.py): the scripted game's rules, the job those processes rebuild by this module's name
(``dg.build_reconstructable_job`` from ``tests/``, so they import it and its helpers as pytest did), and
the killer that ends a shard's process mid-episode."""

import os
import signal
import time
from pathlib import Path

import dagster as dg
import yaml
from builders import endpoints_file

from automem_dagster.defs.resources import LLMEndpointsResource, MlflowResource, StorageResource
from automem_dagster.defs.structure.assets import rollout_batch

TESTS = Path(__file__).resolve().parent
"""The working directory the shard processes rebuild a job from: this folder, where this module is."""

RULES = [
    {"match": "Phase: LOG", "reply": "<|DONE|>"},
    {"match": "Step 2. Your previous action", "reply": "<|ACTION|>do<|END|>"},
    # Step 4's action comes slowly (the same action as every other step's), so the first shard's
    # process is still in the middle of its episodes when the test kills it after their step 3.
    {"match": "Step 4. Your previous action", "reply": "<|ACTION|>move_left<|END|>", "delay_s": 3},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>move_left<|END|>"},
]
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


def kill_first_shard_mid_episode(instance: dg.DagsterInstance, shard: Path, killed: list[int]) -> None:
    """SIGKILL the first shard's step process once one of its episodes has recorded 3 steps (as a lost
    pod or an out-of-memory kill would end it), its process found by the step's start event."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(recorded_steps(partial) >= 3 for partial in shard.glob("trajectories/*.jsonl.partial")):
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


def recorded_steps(partial: Path) -> int:
    try:
        return partial.read_text().count('"type": "step"')
    except FileNotFoundError:                                # the episode finished: renamed meanwhile
        return 0


def rollout_endpoints(tmp_path, server):
    return endpoints_file(tmp_path / "endpoints.yaml", server, ("game",), max_retries=0)
