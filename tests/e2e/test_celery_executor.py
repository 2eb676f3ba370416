"""A sharded rollout_batch under Dagster's Celery executor, on real Celery workers (``automem worker``)
and Debian's redis-server, both started here on 127.0.0.1 and stopped by PID.

A whole round on the workers, its shards in two or more worker processes and a whole worker lost,
is tests/e2e/test_celery_rounds.py. Here: a worker's child killed with
SIGKILL mid-episode gives its shard back to the broker (``task_acks_late`` with
``task_reject_on_worker_lost``) and the shard's next delivery resumes the interrupted episode instead
of replaying it; with Celery's own defaults for those two settings, the same kill fails the run with
Celery's WorkerLostError, soon and with a message, instead of hanging; and a run whose broker disappears
fails with a message rather than hanging.
"""

import asyncio
import shutil
import signal
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from batch_content import batch_content
from celery_cluster import PATHS_ENV, celery_rollout_job_handle, started_cluster
from sharded_rollouts import EPISODES, KILLED, RULES, STEPS, kill_first_shard_mid_episode, rollout_endpoints

from automem_dagster.defs.execution.celery import celery_config, visibility_timeout
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

pytestmark = [pytest.mark.integration, pytest.mark.ci_required]

SHARDS = 4
CELERY_DEFAULTS = {"task_acks_late": False, "task_reject_on_worker_lost": False}
"""Celery's own values of the two settings the project turns on (Celery 5.x docs, Configuration and defaults:
task_acks_late, task_reject_on_worker_lost): a task is acknowledged when received and never given back."""
RUN_LIMIT_S = 240
"""The longest a run that must fail may take here before the test calls it hung."""


@pytest.fixture
def celery_cluster(tmp_path):
    """Two workers and their broker (``started_cluster``) in a bare DAGSTER_HOME."""
    with started_cluster(tmp_path, tmp_path / "dagster_home") as cluster:
        yield cluster


def _setup(tmp_path, storage, scripted, cluster):
    """The scripted endpoint, the round's start and a clean copy of the scaffolds for the one-process batch."""
    clean = StorageResource(runs=str(tmp_path / "clean-runs"), scaffolds=str(tmp_path / "clean-scaffolds"),
                            lineage=str(tmp_path / "clean-lineage"), specialists=str(tmp_path / "clean-specialists"))
    shutil.copytree(storage.scaffolds, clean.scaffolds)
    server = scripted(RULES)
    cluster.paths.write_text(yaml.safe_dump({
        "endpoints": str(rollout_endpoints(tmp_path, server)), "runs": storage.runs, "scaffolds": storage.scaffolds,
        "lineage": storage.lineage, "specialists": storage.specialists, "mlflow": f"sqlite:///{tmp_path}/mlflow.db"}))
    settings = StructureConfig(budget=Budget(rollout_episodes=EPISODES, rollout_max_steps=STEPS, eval_max_steps=STEPS,
                                             eval_episodes=2)).for_game("crafter")
    return server, settings, clean


def _run_config(cluster, shards: int = SHARDS, overrides: dict | None = None) -> dict:
    seeds_per_shard = -(-EPISODES // shards)
    visibility = visibility_timeout(STEPS, seeds_per_shard, 2, 60)
    budget = {"rollout_episodes": EPISODES, "rollout_max_steps": STEPS, "concurrency": 2}
    return {"ops": {"rollout_batch": {"config": {"budget": budget, "shards": shards}}},
            "execution": {"config": celery_config(cluster.broker, visibility, overrides=overrides)}}


def _one_process_batch(tmp_path, server, settings, clean):
    store = clean.storage()
    start = start_round(settings, store)
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url=server.base_url, model="scripted",
                                                 constrained="none", max_retries=0))

    async def play():
        async with connect(config, tmp_path / "logs") as clients:
            return await run_batch(rollout_spec(settings, start.scaffold, start.seeds, store), clients)

    return asyncio.run(play()).out_dir


def test_a_worker_child_killed_mid_episode_is_redelivered_and_resumes(tmp_path, storage, scripted, celery_cluster,
                                                                     monkeypatch):
    server, settings, clean = _setup(tmp_path, storage, scripted, celery_cluster)
    monkeypatch.setenv(PATHS_ENV, str(celery_cluster.paths))
    start = start_round(settings, storage.storage())
    first_shard = shard_dir(rollout_spec(settings, start.scaffold, start.seeds, storage.storage()).out_dir, 0)
    with dg.DagsterInstance.from_config(str(celery_cluster.home)) as instance:
        killed: list[int] = []
        killer = threading.Thread(target=kill_first_shard_mid_episode, args=(instance, first_shard, killed))
        killer.start()
        with dg.execute_job(celery_rollout_job_handle(), instance=instance,
                            run_config=_run_config(celery_cluster, shards=2),
                            tags={"dagster/partition": "crafter"}) as result:
            killer.join()
            assert result.success
            # The worker's child records its step's start itself, so the killed attempt is in the run's log.
            starts = [entry.dagster_event.pid for entry in instance.all_logs(result.run_id)
                      if entry.dagster_event is not None and entry.step_key == KILLED
                      and entry.dagster_event.event_type == dg.DagsterEventType.STEP_START]
            [materialization] = result.asset_materializations_for_node("rollout_batch")
            batch = materialization.metadata["batch"].value
    print(f"killed worker child {killed}; {KILLED} started in processes {starts}")
    assert killed and len(starts) >= 2 and starts[-1] != killed[0], (killed, starts)
    first_seeds = plan_shards(start.seeds, shard_count=2)[0]
    assert all('"resumes"' in trajectory_path(Path(batch), episode_id("crafter", seed)).read_text()
               for seed in first_seeds)
    assert batch_content(batch) == batch_content(_one_process_batch(tmp_path, server, settings, clean))


def test_a_run_whose_broker_disappears_fails_with_a_message(tmp_path, storage, scripted, celery_cluster, monkeypatch):
    _setup(tmp_path, storage, scripted, celery_cluster)
    monkeypatch.setenv(PATHS_ENV, str(celery_cluster.paths))
    celery_cluster.redis.send_signal(signal.SIGKILL)
    celery_cluster.redis.wait(timeout=20)
    outcome, seconds = _run_bounded(celery_cluster, _run_config(celery_cluster))
    print(f"the run without its broker failed in {seconds:.1f} s")
    assert outcome["success"] is False
    assert "celery task submission" in outcome["messages"], outcome["messages"][-3000:]
    assert f"{celery_cluster.broker.split('/')[2]}. Connection refused" in outcome["messages"], outcome["messages"][-3000:]


def test_with_celerys_ack_defaults_a_killed_worker_child_fails_the_run(tmp_path, storage, scripted, monkeypatch):
    defaults = tmp_path / "celery-defaults.yaml"
    defaults.write_text(yaml.safe_dump({"config_source": CELERY_DEFAULTS}))
    # The workers take the settings as a user gives them (`automem worker --config-yaml`), the run in its config.
    with started_cluster(tmp_path, tmp_path / "dagster_home", worker_args=("--config-yaml", str(defaults))) as cluster:
        _, settings, _ = _setup(tmp_path, storage, scripted, cluster)
        monkeypatch.setenv(PATHS_ENV, str(cluster.paths))
        start = start_round(settings, storage.storage())
        first_shard = shard_dir(rollout_spec(settings, start.scaffold, start.seeds, storage.storage()).out_dir, 0)
        killed: list[int] = []
        with dg.DagsterInstance.from_config(str(cluster.home)) as instance:
            killer = threading.Thread(target=kill_first_shard_mid_episode, args=(instance, first_shard, killed))
            killer.start()
            outcome, seconds = _run_bounded(cluster, _run_config(cluster, shards=2, overrides=CELERY_DEFAULTS))
            killer.join()
            starts = [entry for entry in instance.all_logs(outcome["run_id"]) if entry.step_key == KILLED
                      and entry.dagster_event is not None and entry.dagster_event.event_type_value == "STEP_START"]
        worker_logs = " ".join(log.read_text() for log in cluster.logs)
    print(f"killed worker child {killed}; the run failed in {seconds:.1f} s")
    assert "acks late False, reject on worker lost False" in worker_logs, worker_logs[-3000:]
    assert "HTTP Request:" not in worker_logs                  # the workers log no line per model call
    assert killed and f"pid:{killed[0]} exited with 'signal 9 (SIGKILL)'" in worker_logs, worker_logs[-3000:]
    assert outcome["success"] is False and len(starts) == 1    # acknowledged on receipt: never delivered again
    for said in (KILLED, "WorkerLostError", "signal 9 (SIGKILL)"):
        assert said in outcome["messages"], outcome["messages"][-3000:]


def _run_bounded(cluster, run_config: dict) -> tuple[dict, float]:
    """Run the job on ``cluster`` in a thread; its success, run id and every message and error of its events,
    and the seconds it took. Fails the test if the run is still going after ``RUN_LIMIT_S``."""
    outcome: dict = {}

    def run() -> None:
        with dg.DagsterInstance.from_config(str(cluster.home)) as instance:
            with dg.execute_job(celery_rollout_job_handle(), instance=instance, run_config=run_config,
                                tags={"dagster/partition": "crafter"}, raise_on_error=False) as result:
                outcome.update(success=result.success, run_id=result.run_id)
                # The engine event that ends the run carries the workers' or the broker's error beneath its message.
                errors = [getattr(e.event_specific_data, "error", None) for e in result.all_events]
                outcome["messages"] = " ".join([*(e.message or "" for e in result.all_events),
                                                *(error.to_string() for error in errors if error is not None)])

    began = time.monotonic()
    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(timeout=RUN_LIMIT_S)
    assert not runner.is_alive(), f"the run was still going after {RUN_LIMIT_S} s: hung"
    return outcome, time.monotonic() - began
