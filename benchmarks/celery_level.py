"""The Celery level of ``rollout_scaling``: the same episodes as a Dagster run whose seed shards are played by
``automem worker`` processes (one pool process each) over a local Redis.

``local_cluster`` starts redis-server and the workers on 127.0.0.1 as a user would on one machine (the
instance migrated once, then the workers) and stops them by PID; the suite's Celery tests start theirs with
it too. ``play_on_workers`` runs a three-step job (plan, one shard step per worker, merge) built from the
project's own shard steps (``defs/execution/shards.py``) on the Celery executor, and reports the shards'
rate over their playing window (the first shard step's start to the last one's end, so the run's start
and the merge are apart, as for the shard processes), the whole run's time beside it, and the CPU the
workers (main and pool processes) and the scripted server spent per step.
"""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dagster as dg
import yaml

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.execution.celery import celery_config
from automem_dagster.defs.execution.shards import Arm, merge_arms, shard_op, shard_outputs
from automem_dagster.defs.plans.values import Shard
from automem_dagster.defs.resources import LLMEndpointsResource, StorageResource
from automem_dagster.rollout.shards import spec_from_record, spec_record
from benchmarks.common import BOUNDED, MISS, batch_episodes, process_stat, ratio, target

READY_S = 120
SPEEDUP_LIMIT = 1.6
"""The issue's target: 2 worker processes at 1.6x one process, on 2 cores."""
REPO = Path(__file__).resolve().parent.parent


class ClusterError(RuntimeError):
    """redis-server or a worker did not come up; the message holds the end of its log."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _wait_for(what: str, ready, log: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline and process.poll() is None:
        if ready():
            return
        time.sleep(0.2)
    ended = f"exited with {process.returncode}" if process.poll() is not None else f"not ready within {READY_S} s"
    raise ClusterError(f"{what} {ended}; its log {log}:\n{_read(log)[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


@contextlib.contextmanager
def local_cluster(work: Path, home: Path, workers: int = 2, visibility_s: int = 3600, env: dict | None = None,
                  worker_args: tuple[str, ...] = ()):
    """redis-server and ``workers`` ``automem worker`` processes (one pool process each, each the leader of its
    own process group) on 127.0.0.1, with a migrated instance in their DAGSTER_HOME ``home``; ``env`` is added
    to theirs, ``worker_args`` to their command lines. Stopped by PID on exit."""
    if shutil.which("redis-server") is None:
        raise ClusterError("redis-server is not installed (Debian: apt-get install redis-server)")
    port, redis_log = _free_port(), work / "redis.log"
    broker = f"redis://127.0.0.1:{port}/0"
    work.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                              "--appendonly", "no", "--logfile", str(redis_log)])
    path = os.pathsep.join([str(REPO), (env or {}).get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))])
    full_env = {**os.environ, **(env or {}), "DAGSTER_HOME": str(home), "PYTHONPATH": path}
    automem = [sys.executable, "-m", "automem_dagster.cli", "worker", "--broker", broker]
    started: list[subprocess.Popen] = []
    try:
        _wait_for("redis-server", lambda: "Ready to accept connections" in _read(redis_log), redis_log, redis)
        subprocess.run([*automem, "--migrate"], env=full_env, check=True, timeout=READY_S, capture_output=True)
        logs = [work / f"worker{i}.log" for i in range(workers)]
        for i, log in enumerate(logs):
            with log.open("w") as out:
                started.append(subprocess.Popen([*automem, "--name", f"w{i}@127.0.0.1", "--concurrency", "1",
                                                 "--visibility-timeout", str(visibility_s), *worker_args], env=full_env,
                                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        for log, worker in zip(logs, started, strict=True):
            _wait_for("a Celery worker", lambda log=log: " ready." in _read(log), log, worker)
        yield SimpleNamespace(broker=broker, home=home, redis=redis, workers=started, logs=logs)
    finally:
        for process in [*started, redis]:
            stop(process)


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far, from /proc (Linux); 0 for a process gone."""
    try:
        return process_stat(pid)[1]
    except FileNotFoundError:
        return 0.0


def family_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its live children (a worker and its pool processes)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    kids = [int(c) for c in _read(children).split()] if children.exists() else []
    return cpu_s(pid) + sum(family_cpu_s(kid) for kid in kids)


class BenchConfig(dg.Config):
    spec: str
    """The batch's ``spec_record`` as JSON; its scaffold a version in the project's scaffolds."""
    shards: int


@dg.op(out={"shards": dg.DynamicOut(Shard)})
def bench_plan(config: BenchConfig, storage: StorageResource):
    spec = spec_from_record(json.loads(config.spec), storage.storage().scaffolds)
    yield from shard_outputs([Arm("bench", spec)], RoundConfig(shards=config.shards))


@dg.op
def bench_merge(storage: StorageResource, played: list[Shard]) -> str:
    [summary] = merge_arms(storage.storage(), played)[0].values()
    return summary.out_dir


def celery_bench_job() -> dg.JobDefinition:
    """What the run and the workers rebuild: plan, shards, merge, on the Celery executor."""
    from dagster_celery import celery_executor

    @dg.job(executor_def=celery_executor, resource_defs={"endpoints": LLMEndpointsResource(),
                                                         "storage": StorageResource()})
    def celery_bench():
        bench_merge(bench_plan().map(shard_op("bench_shard")).collect())

    return celery_bench


def play_on_workers(spec, endpoints: Path, cluster, server_pid: int, server_cpu) -> dict[str, Any]:
    """``spec``'s seeds in one shard per worker of ``cluster``, as one Dagster run; the figures of the run."""
    shards = len(cluster.workers)
    run_config = {"ops": {"bench_plan": {"config": {"spec": json.dumps(spec_record(spec)), "shards": shards}}},
                  "resources": {"endpoints": {"config": {"endpoints_file": str(endpoints)}},
                                "storage": {"config": {"runs": str(Path(spec.out_dir).parent)}}},
                  "execution": {"config": celery_config(cluster.broker, 3600)}}
    job = dg.build_reconstructable_job(__name__, "celery_bench_job", reconstructor_working_directory=str(REPO))
    workers_before = sum(family_cpu_s(w.pid) for w in cluster.workers)
    server_before = server_cpu(server_pid)
    started = time.perf_counter()
    with dg.DagsterInstance.from_config(str(cluster.home)) as instance:
        with dg.execute_job(job, instance, run_config=run_config) as result:
            if not result.success:
                raise ClusterError(f"the Celery level's run {result.run_id} failed; see {cluster.logs}")
            windows = _shard_windows(instance, result.run_id)
            pids = sorted({e.pid for e in result.all_events if "bench_shard" in (e.step_key or "")
                           and e.event_type_value == "STEP_START"})
    total = time.perf_counter() - started
    first = min(w[0] for w in windows)
    return {"worker_processes": shards, "window_s": max(w[1] for w in windows) - first, "total_s": total,
            "shard_windows_s": [[w[0] - first, w[1] - first] for w in windows], "pool_pids": pids,
            "workers_cpu_s": sum(family_cpu_s(w.pid) for w in cluster.workers) - workers_before,
            "server_cpu_s": server_cpu(server_pid) - server_before}


def _shard_windows(instance: dg.DagsterInstance, run_id: str) -> list[tuple[float, float]]:
    """Each shard step's (start, end) in epoch seconds, from the run's event log."""
    starts, ends = {}, {}
    for entry in instance.all_logs(run_id):
        key, event = entry.step_key or "", entry.dagster_event
        if "bench_shard" in key and event is not None and event.event_type_value == "STEP_START":
            starts[key] = entry.timestamp
        elif "bench_shard" in key and event is not None and event.event_type_value == "STEP_SUCCESS":
            ends[key] = entry.timestamp
    return [(starts[k], ends[k]) for k in sorted(ends)]


def level_figures(run: dict[str, Any], steps: int, episodes: int) -> dict[str, Any]:
    """A Celery run's figures in the shape of ``rollout_scaling``'s levels (the workers as the process)."""
    return {"episodes": episodes, "steps": steps, "elapsed_s": run["window_s"],
            "steps_per_s": ratio(steps, run["window_s"]), "process_cpu_s_per_step": ratio(run["workers_cpu_s"], steps),
            "server_cpu_s_per_step": ratio(run["server_cpu_s"], steps), **run}


def measure_levels(counts: list[int], episodes: int, server, work: Path, spec_of, cpu_of) -> dict[int, dict[str, Any]]:
    """``episodes`` episodes on ``n`` workers for each ``n`` of ``counts``, each count a fresh broker and
    workers; ``spec_of(name, concurrency)`` gives the batch's spec, ``cpu_of(pid)`` the server's CPU so far."""
    endpoints = work / "celery-endpoints.yaml"
    endpoints.write_text(yaml.safe_dump({"game": {"name": "game", "base_url": server.base_url, "model": "scripted",
                                                  "constrained": "none", "max_retries": 1, "timeout_s": 120}}))
    levels = {}
    for n in counts:
        spec = spec_of(f"celery-{n}", max(1, episodes // n))
        with local_cluster(work / f"celery-{n}-work", work / f"celery-{n}-home", workers=n) as cluster:
            run = play_on_workers(spec, endpoints, cluster, server.pid, cpu_of)
        steps = sum(map(len, batch_episodes(Path(spec.out_dir))))
        levels[n] = level_figures(run, steps, episodes)
    return levels


def celery_target(levels: dict[int, dict[str, Any]], one_process: dict[str, Any], episodes: int,
                  alone: dict[str, Any]) -> dict[str, Any]:
    """The most workers' rate over one process's at the same episodes against ``SPEEDUP_LIMIT``; where the
    workers' CPU bound (the cores over the workers' and the server's CPU per step) allows less, the verdict
    is ``BOUNDED``, with the figures. Beside it, not used to excuse a miss: ``speedup_shares_alone_allow``,
    the workers' count times the rate of ``alone`` (one worker's share of the episodes played alone in one
    process, when it is that share) over one process's rate: each worker plays no faster than its share does."""
    n = max(levels)
    figures, bound = levels[n], levels[n]["cpu_bound"]
    speedup = ratio(figures["steps_per_s"], one_process["steps_per_s"])
    allowed = ratio(bound["steps_per_s"], one_process["steps_per_s"])
    shares = ratio(n * alone["steps_per_s"], one_process["steps_per_s"]) if alone["episodes"] == episodes // n else None
    note = (f"{bound['cores']} cores at {bound['cpu_s_per_step'] * 1e3:.3g} ms CPU a step (workers and server) give "
            f"at most {bound['steps_per_s']:.4g} steps/s, {allowed:.3g}x one process's "
            f"{one_process['steps_per_s']:.4g}; the workers reached {figures['steps_per_s']:.4g} "
            f"({bound['share_of_bound']:.0%} of that bound) over their shards' window, the run took "
            f"{figures['total_s']:.3g} s in all (dispatch and merge included)"
            + (f"; {alone['episodes']} episodes alone in one process step {alone['steps_per_s']:.4g} times a second, "
               f"so {n} such workers give {shares:.3g}x" if shares else ""))
    t = target(f"{n} Celery worker processes over one process ({episodes} episodes)", speedup, SPEEDUP_LIMIT, ">=",
               unit="x", note=note)
    if t["verdict"] == MISS and allowed < SPEEDUP_LIMIT:
        t["verdict"] = BOUNDED
    return {**t, "speedup_cpu_bound_allows": allowed, "speedup_shares_alone_allow": shares,
            "one_worker_over_one_process": ratio(levels[min(levels)]["steps_per_s"], one_process["steps_per_s"])}
