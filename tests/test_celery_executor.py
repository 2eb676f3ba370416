"""A sharded rollout_batch under Dagster's Celery executor, on real Celery workers (``automem worker``)
and Debian's redis-server, both started here on 127.0.0.1 and stopped by PID.

The shards run in the workers' pool processes (their PIDs come from the steps' events: none is this
run's own); the merged batch equals one process playing every seed; a worker's child killed with
SIGKILL mid-episode gives its shard back to the broker (``task_acks_late`` with
``task_reject_on_worker_lost``) and the shard's next delivery resumes the interrupted episode instead
of replaying it; and a run whose broker disappears fails with a message rather than hanging.
"""

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
import yaml
from batch_content import batch_content
from test_sharded_dagster import EPISODES, KILLED, RULES, STEPS, _endpoints, _kill_first_shard_mid_episode

from automem_dagster.defs.common.celery import celery_config, visibility_timeout
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

pytestmark = [pytest.mark.integration, pytest.mark.ci_required]

PATHS_ENV = "AUTOMEM_TEST_CELERY_PATHS"
"""A file naming the test's endpoints and storage: the workers, started once, read it at each step."""
SHARDS = 4
READY_S = 90


def celery_rollout_job():
    """The rollout asset alone, under the Celery executor, on the files named in $AUTOMEM_TEST_CELERY_PATHS."""
    from dagster_celery import celery_executor

    paths = yaml.safe_load(Path(os.environ[PATHS_ENV]).read_text())
    resources = {"endpoints": LLMEndpointsResource(endpoints_file=paths["endpoints"]),
                 "storage": StorageResource(runs=paths["runs"], scaffolds=paths["scaffolds"], lineage=paths["lineage"],
                                            specialists=paths["specialists"]),
                 "mlflow": MlflowResource(tracking_uri=paths["mlflow"])}
    job = dg.define_asset_job("celery_rollout", selection=[rollout_batch], executor_def=celery_executor)
    return dg.Definitions(assets=[rollout_batch], jobs=[job], resources=resources).resolve_job_def("celery_rollout")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(what: str, ready, log: Path, timeout_s: float = READY_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} not ready within {timeout_s} s; its log {log}:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


@pytest.fixture
def celery_cluster(tmp_path):
    """redis-server and two ``automem worker`` processes (one pool process each) on 127.0.0.1, with a
    migrated instance in their DAGSTER_HOME; stopped by PID afterwards."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    pytest.importorskip("dagster_celery", reason="the celery extra is not installed")
    port = _free_port()
    broker = f"redis://127.0.0.1:{port}/0"
    home, paths = tmp_path / "dagster_home", tmp_path / "paths.yaml"
    home.mkdir()
    redis_log = tmp_path / "redis.log"
    redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                              "--appendonly", "no", "--logfile", str(redis_log)])
    tests = os.path.dirname(__file__)
    env = {**os.environ, "DAGSTER_HOME": str(home), PATHS_ENV: str(paths),
           "PYTHONPATH": os.pathsep.join([str(Path(tests).parent), tests, os.environ.get("PYTHONPATH", "")])}
    automem = [sys.executable, "-m", "automem_dagster.cli", "worker", "--broker", broker]
    workers: list[subprocess.Popen] = []
    try:
        _wait_for("redis-server", lambda: "Ready to accept connections" in _read(redis_log), redis_log)
        subprocess.run([*automem, "--migrate"], env=env, check=True, timeout=120)
        logs = [tmp_path / f"worker{i}.log" for i in range(2)]
        for i, log in enumerate(logs):
            with log.open("w") as out:
                workers.append(subprocess.Popen([*automem, "--name", f"w{i}@127.0.0.1", "--concurrency", "1"],
                                                env=env, stdout=out, stderr=subprocess.STDOUT))
        for log in logs:
            _wait_for("a Celery worker", lambda log=log: " ready." in _read(log), log)
        yield SimpleNamespace(broker=broker, home=home, paths=paths, redis=redis, workers=workers, logs=logs)
    finally:
        for process in [*workers, redis]:
            _stop(process)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _setup(tmp_path, storage, scripted, cluster):
    """The scripted endpoint, the round's start and a clean copy of the scaffolds for the one-process batch."""
    clean = StorageResource(runs=str(tmp_path / "clean-runs"), scaffolds=str(tmp_path / "clean-scaffolds"),
                            lineage=str(tmp_path / "clean-lineage"), specialists=str(tmp_path / "clean-specialists"))
    shutil.copytree(storage.scaffolds, clean.scaffolds)
    server = scripted(RULES)
    cluster.paths.write_text(yaml.safe_dump({
        "endpoints": str(_endpoints(tmp_path, server)), "runs": storage.runs, "scaffolds": storage.scaffolds,
        "lineage": storage.lineage, "specialists": storage.specialists, "mlflow": f"sqlite:///{tmp_path}/mlflow.db"}))
    settings = RoundSettings("crafter", EPISODES, STEPS, STEPS, 2, 2, 3)
    return server, settings, clean


def _run_config(cluster, shards: int = SHARDS) -> dict:
    seeds_per_shard = -(-EPISODES // shards)
    return {"ops": {"rollout_batch": {"config": {"rollout_episodes": EPISODES, "rollout_max_steps": STEPS,
                                                 "concurrency": 2, "shards": shards}}},
            "execution": {"config": celery_config(cluster.broker, visibility_timeout(STEPS, seeds_per_shard, 2, 60))}}


def _job():
    # Worker processes import this module by name from tests/, as pytest did.
    return dg.build_reconstructable_job(__name__, "celery_rollout_job",
                                        reconstructor_working_directory=os.path.dirname(__file__))


def _one_process_batch(tmp_path, server, settings, clean):
    store = clean.storage()
    start = start_round(settings, store)
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url=server.base_url, model="scripted",
                                                 constrained="none", max_retries=0))

    async def play():
        async with connect(config, tmp_path / "logs") as clients:
            return await run_batch(rollout_spec(settings, start.scaffold, start.seeds, store), clients)

    return asyncio.run(play()).out_dir


def _shard_pids(result) -> set[int]:
    return {e.pid for e in result.all_events
            if e.event_type_value == "STEP_START" and "rollout_batch_shard" in (e.step_key or "")}


def test_shards_on_two_celery_workers_merge_into_the_one_process_batch(tmp_path, storage, scripted, celery_cluster,
                                                                       monkeypatch):
    server, settings, clean = _setup(tmp_path, storage, scripted, celery_cluster)
    monkeypatch.setenv(PATHS_ENV, str(celery_cluster.paths))
    worker_children = {p.pid for p in celery_cluster.workers}
    with dg.DagsterInstance.from_config(str(celery_cluster.home)) as instance:
        with dg.execute_job(_job(), instance=instance, run_config=_run_config(celery_cluster),
                            tags={"dagster/partition": "crafter"}) as result:
            assert result.success
            pids = _shard_pids(result)
            [materialization] = result.asset_materializations_for_node("rollout_batch")
            batch = materialization.metadata["batch"].value
    print(f"shard steps ran in worker processes {sorted(pids)} (this run: {os.getpid()}, "
          f"worker main processes: {sorted(worker_children)})")
    assert len(pids) >= 2 and os.getpid() not in pids and not pids & worker_children, pids
    assert batch_content(batch) == batch_content(_one_process_batch(tmp_path, server, settings, clean))


def test_a_worker_child_killed_mid_episode_is_redelivered_and_resumes(tmp_path, storage, scripted, celery_cluster,
                                                                     monkeypatch):
    server, settings, clean = _setup(tmp_path, storage, scripted, celery_cluster)
    monkeypatch.setenv(PATHS_ENV, str(celery_cluster.paths))
    start = start_round(settings, storage.storage())
    first_shard = shard_dir(rollout_spec(settings, start.scaffold, start.seeds, storage.storage()).out_dir, 0)
    with dg.DagsterInstance.from_config(str(celery_cluster.home)) as instance:
        killed: list[int] = []
        killer = threading.Thread(target=_kill_first_shard_mid_episode, args=(instance, first_shard, killed))
        killer.start()
        with dg.execute_job(_job(), instance=instance,
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
    outcome: dict = {}

    def run() -> None:
        with dg.DagsterInstance.from_config(str(celery_cluster.home)) as instance:
            with dg.execute_job(_job(), instance=instance, run_config=_run_config(celery_cluster),
                                tags={"dagster/partition": "crafter"}, raise_on_error=False) as result:
                outcome["success"] = result.success
                # The engine event that ends the run carries the broker's error beneath its message.
                errors = [getattr(e.event_specific_data, "error", None) for e in result.all_events]
                outcome["messages"] = " ".join([*(e.message or "" for e in result.all_events),
                                                *(error.to_string() for error in errors if error is not None)])

    began = time.monotonic()
    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(timeout=240)
    assert not runner.is_alive(), "the run hung after its broker disappeared"
    print(f"the run without its broker failed in {time.monotonic() - began:.1f} s")
    assert outcome["success"] is False
    assert "celery task submission" in outcome["messages"], outcome["messages"][-3000:]
    assert f"{celery_cluster.broker.split('/')[2]}. Connection refused" in outcome["messages"], outcome["messages"][-3000:]
