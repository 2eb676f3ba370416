"""Two worker hosts against one: the Celery level of ``rollout_scaling`` with each worker on a host of its own.

``deploy/two-hosts.sh`` makes the hosts (root, Linux network namespaces; docs/scale.md, "On two machines"): the
main host runs Postgres (the instance), redis-server, the scripted stand-in answering every call after
``--latency`` seconds, and one ``automem worker`` for the steps that are not shards (plan, merge); each worker host
runs one ``automem worker`` of one pool process serving the shards' queue. The same episodes are played as one
Dagster run (``benchmarks/celery_level.py``'s plan, one shard per worker host, merge) on one worker host, then,
on a fresh topology, on two. The rate is taken over the shards' playing window, as the Celery level does, with
the workers' and the server's CPU per step and the bound the machine's cores put on them
(``rollout_scaling.cpu_bound``): two worker hosts on one machine share its cores, so where that bound allows
less than the target the verdict is BOUNDED. The load average before and after is reported beside the figures:
other work on the machine changes them. Each topology's traffic between its hosts (``two-hosts.sh traffic``: per
service the connections, packets and bytes, and the fences' drops) is kept in the result.

Run as root: ``PYTHONPATH=$PWD .venv/bin/python -m benchmarks.two_hosts_scaling --out FILE``. The measurement
itself runs on the main host (``--inner``, started by the outer run through ``two-hosts.sh main``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from benchmarks.celery_level import REPO, level_figures, play_on_workers
from benchmarks.common import BOUNDED, MISS, batch_episodes, emit, parser, ratio, start_result, table, target

NAME = "two_hosts_scaling"
SCRIPT = REPO / "deploy" / "two-hosts.sh"
GAME = "minihack:Corridor-R3"
FULL = {"episodes": 32, "max_steps": 20, "latency_s": 0.2, "hosts": [1, 2]}
QUICK = {"episodes": 4, "max_steps": 3, "latency_s": 0.05, "hosts": [1, 2]}
SPEEDUP_LIMIT = 1.6
"""The issue's target: two worker processes at 1.6x one (benchmarks/celery_level.py)."""
READY_S = 180


def _run(command: list[str], env: dict, limit_s: float = 600) -> str:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=limit_s)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])} ... exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def _on(folder: Path, host: str, *command: str, dagster_home: Path) -> list[str]:
    """``command`` on ``host`` (``main``, ``worker``, ``worker2``, ...) of the topology in ``folder``."""
    where = ["main", str(folder)] if host == "main" else ["worker", str(folder), "--host", host.removeprefix("worker") or "1"]
    return ["bash", str(SCRIPT), *where, "env", f"DAGSTER_HOME={dagster_home}", *command]


def _wait_ready(log: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_S
    while " ready." not in (log.read_text() if log.exists() else ""):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"a worker did not come up; its log {log}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def measure_hosts(n: int, settings: dict[str, Any], work: Path) -> dict[str, Any]:
    """The episodes on ``n`` worker hosts (one worker process each) of a fresh topology; taken down after."""
    folder = work / f"hosts-{n}"
    rules = work / "rules.json"
    env = {**os.environ, "AUTOMEM_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    name = f"bh{os.getpid() % 10000}{n}"
    started: list[subprocess.Popen] = []
    try:
        _run(["bash", str(SCRIPT), "up", str(folder), "--name", name, "--workers", str(n), "--model", "scripted",
              str(rules)], env)
        env.update(line.split("=", 1) for line in (folder / "hosts.env").read_text().splitlines())
        automem = [sys.executable, "-m", "automem_dagster.cli", "worker"]
        _run(_on(folder, "main", *automem, "--migrate", dagster_home=folder / "main" / "dagster_home"), env)
        hosts = [("main", ["--queue", "dagster"])] + [
            (f"worker{k}" if k > 1 else "worker", ["--queue", "game_endpoint"]) for k in range(1, n + 1)]
        logs = []
        for host, queues in hosts:
            log = folder / f"{host}-automem-worker.log"
            with log.open("w") as out:
                started.append(subprocess.Popen(
                    _on(folder, host, *automem, "--concurrency", "1", "--name", f"{host}@{name}", *queues,
                        dagster_home=folder / host / "dagster_home"),
                    env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            logs.append(log)
        for log, process in zip(logs, started, strict=True):
            _wait_ready(log, process)
        inner = folder / "main" / "figures.json"
        _run(_on(folder, "main", sys.executable, "-m", "benchmarks.two_hosts_scaling", "--inner", json.dumps(
            {**settings, "hosts": n, "out": str(inner), "worker_pids": [p.pid for p in started[1:]],
             "server_pid": int((folder / "main" / "model.pid").read_text())}),
            dagster_home=folder / "main" / "dagster_home"), env, limit_s=1800)
        # What crossed the hosts' fences (deploy/two-hosts.sh's counters), beside the figures it cost.
        return {**json.loads(inner.read_text()),
                "traffic": _run(["bash", str(SCRIPT), "traffic", str(folder)], env).splitlines()}
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, 15)
                process.wait(timeout=60)
        if (folder / "name").exists():
            _run(["bash", str(SCRIPT), "down", str(folder)], env)


def inner(settings: dict[str, Any]) -> None:
    """On the main host: the run on the workers, its figures written to ``settings['out']``."""
    from automem_dagster.rollout import RolloutSpec
    from benchmarks.common import load_scaffold_ref
    from benchmarks.rollout_scaling import FIRST_SEED, server_cpu_s

    project = Path(os.environ["AUTOMEM_HOME"])
    endpoints = project / "endpoints-bench.yaml"
    endpoints.write_text(yaml.safe_dump({"game": {"name": "game", "base_url": "http://10.77.0.1:8080/v1",
                                                  "model": "scripted", "constrained": "none", "max_retries": 1,
                                                  "timeout_s": 120}}))
    n, episodes = settings["hosts"], settings["episodes"]
    seeds = list(range(FIRST_SEED, FIRST_SEED + episodes))
    spec = RolloutSpec(settings["game"], load_scaffold_ref(settings["game"], "v0"), seeds, settings["max_steps"],
                       project / "runs" / f"bench-{n}-hosts", max(1, episodes // n))
    cluster = SimpleNamespace(broker=os.environ["AUTOMEM_CELERY_BROKER"], home=Path(os.environ["DAGSTER_HOME"]),
                              workers=[SimpleNamespace(pid=pid) for pid in settings["worker_pids"]], logs=[])
    run = play_on_workers(spec, endpoints, cluster, settings["server_pid"], server_cpu_s)
    steps = sum(map(len, batch_episodes(Path(spec.out_dir))))
    Path(settings["out"]).write_text(json.dumps(level_figures(run, steps, episodes)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--inner"]:
        inner(json.loads(argv[1]))
        return 0
    from benchmarks.rollout_scaling import cpu_bound, plan_action

    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=None, help="episodes of the run (default 32)")
    p.add_argument("--max-steps", type=int, default=None, help="steps per episode (default 20)")
    p.add_argument("--latency", type=float, default=None, help="seconds the endpoint takes per call (default 0.2)")
    args = p.parse_args(argv)
    base = QUICK if args.quick else FULL
    settings = {"game": GAME, "episodes": args.episodes or base["episodes"],
                "max_steps": args.max_steps or base["max_steps"],
                "latency_s": base["latency_s"] if args.latency is None else args.latency}
    result = start_result(NAME, args.quick, {**settings, "hosts": base["hosts"]})
    cores = len(os.sched_getaffinity(0))
    result["load_average_before"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-two-hosts-") as tmp:
        work = Path(tmp)
        action = plan_action(GAME)
        (work / "rules.json").write_text(json.dumps([
            {"match": "Phase: LOG", "reply": "<|DONE|>", "delay_s": settings["latency_s"]},
            {"match": "Phase: PLAN", "reply": f"<|ACTION|>{action}<|END|>", "delay_s": settings["latency_s"]}]))
        levels = {n: measure_hosts(n, settings, work) for n in base["hosts"]}
    result["load_average_after"] = os.getloadavg()
    for figures in levels.values():
        figures["cpu_bound"] = cpu_bound(figures, cores)
    one, two = levels[1], levels[max(levels)]
    speedup = ratio(two["steps_per_s"], one["steps_per_s"])
    allowed = ratio(two["cpu_bound"]["steps_per_s"], one["steps_per_s"])
    # A shard plays its episodes at once, so every episode's steps follow one another at the stand-in's latency: no
    # topology plays the batch in under max_steps x latency. Reported beside the verdict, as rollout_scaling does.
    floor_s = settings["max_steps"] * settings["latency_s"]
    latency_allows = ratio(one["elapsed_s"], floor_s)
    t = target(f"{max(levels)} worker hosts over one ({settings['episodes']} episodes)", speedup, SPEEDUP_LIMIT, ">=",
               unit="x", note=f"{cores} cores at {two['cpu_bound']['cpu_s_per_step'] * 1e3:.3g} ms CPU a step (workers "
               f"and server) allow {allowed:.3g}x one host's rate; an episode's {settings['max_steps']} steps at "
               f"{settings['latency_s']} s take {floor_s:.3g} s on any topology, so at most {latency_allows:.3g}x one "
               f"host's {one['elapsed_s']:.3g} s; load average {result['load_average_before'][0]:.1f} before, "
               f"{result['load_average_after'][0]:.1f} after")
    if t["verdict"] == MISS and allowed < SPEEDUP_LIMIT:
        t["verdict"] = BOUNDED
    result["results"] = {"hosts": {str(n): f for n, f in levels.items()}, "efficiency": ratio(speedup, max(levels))}
    result["targets"] = [{**t, "speedup_cpu_bound_allows": allowed, "speedup_latency_allows": latency_allows}]
    rows = [[f"{n} worker host(s)", f["steps"], f["elapsed_s"], f["total_s"], f["steps_per_s"],
             f["process_cpu_s_per_step"] * 1e3, f["server_cpu_s_per_step"] * 1e3, f["cpu_bound"]["steps_per_s"],
             f["cpu_bound"]["share_of_bound"]] for n, f in levels.items()]
    emit(result, args.out, [table(f"{GAME}, {settings['episodes']} episodes of {settings['max_steps']} steps, latency "
                                  f"{settings['latency_s']} s a call; load average {result['load_average_before']}",
                                  ["", "steps", "window s", "run s", "steps/s", "workers CPU ms/step",
                                   "server CPU ms/step", "CPU-bound steps/s", "share of bound"], rows)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
