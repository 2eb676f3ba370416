"""What the test suite costs in CPU, by tier, test file and kind of process, and whether ``make test`` can
meet its time target on this machine at that cost.

Issue 52 asks for ``make test`` under 720 s in CI on the 2-core machine. The suite's tests mostly wait on
processes they start (the embedded model server, LoRA trainers, ``automem`` commands, Dagster, MLflow,
Chromium, Celery workers), so the pytest workers' own CPU says little: this benchmark runs the tiers as
``make test`` does (``make unit``, ``make contract``, ``make e2e``), samples every process on the machine
from ``/proc`` every ``SAMPLE_S`` seconds, and has each pytest worker note when each test starts and ends
(``benchmarks/suite_clock.py``). Each CPU increase of a process is charged to the test that was running on
the worker the process descends from, at the time of the increase, so a session-wide server is shared out
among the tests that used it. A process that left its worker's tree (a daemon started in a new session and
re-parented to init) is charged to ``outside any test``.

The machine's busy CPU time (``/proc/stat``) over the usable cores is the floor of the wall time at that
cost: where the floor of the three tiers exceeds the target, no ordering of the tests meets it and the
target's verdict is ``bounded by CPU``. Processes that lived less than one sampling interval are not seen;
the difference between busy and sampled CPU is reported as ``unsampled``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.common import BOUNDED, MISS, emit, parser, process_stat, start_result, table, target
from benchmarks.suite_clock import CLOCK_ENV

NAME = "suite_cost"
ROOT = Path(__file__).resolve().parents[1]
TIERS = ("unit", "contract", "e2e")
TARGET_S = 720
SAMPLE_S = 0.2
HZ = os.sysconf("SC_CLK_TCK")
OUTSIDE = "outside any test"
KINDS = (
    ("embedded model server", r"automem_dagster\.llm\.embedded_server"),
    ("LoRA trainer", r"automem_dagster\.training\.sft"),
    ("Celery worker", r"automem_dagster\.cli worker|automem worker"),
    ("automem command", r"automem_dagster\.cli|bin/automem "),
    ("Dagster", r"dagster"),
    ("MLflow", r"mlflow|uvicorn"),
    ("Chromium", r"chrom"),
    ("DVC", r"dvc"),
    ("pytest worker", r"exec\(eval\(sys\.stdin|-m pytest"),
    ("Redis, PostgreSQL", r"redis-server|postgres"),
    ("other Python", r"python"),
)
"""Kinds of process by their command line, first match wins."""


def kind_of(cmdline: str) -> str:
    return next((kind for kind, pattern in KINDS if re.search(pattern, cmdline)), "other")


def busy_cpu_s() -> float:
    """The machine's CPU time spent on anything but idle and I/O wait since boot, in seconds."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / HZ


class Sampler(threading.Thread):
    """Every process's command line, ancestry at first sight and CPU series, read from ``/proc``."""

    def __init__(self):
        super().__init__(daemon=True)
        self.procs: dict[int, dict[str, Any]] = {}
        self.done = threading.Event()

    def _first_sight(self, pid: int, ppid: int, cpu: float, at: float, before_start: bool) -> dict[str, Any]:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = ""
        chain, parent = [], ppid
        while parent > 1 and len(chain) < 16:
            chain.append(parent)
            try:
                parent = process_stat(parent)[0]
            except (OSError, IndexError, ValueError):
                break
        # The series starts from the CPU not to charge: a process running before the benchmark started is
        # charged only what it spends from here on, a new one everything (``sample`` adds its CPU at once).
        return {"cmdline": cmdline, "chain": chain, "series": [(at, cpu if before_start else 0.0)]}

    def sample(self, before_start: bool = False) -> None:
        at, me = time.time(), os.getpid()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            pid = int(name)
            try:
                ppid, cpu = process_stat(pid)
            except (OSError, IndexError, ValueError):
                continue  # gone between the listing and the read
            proc = self.procs.get(pid) or self.procs.setdefault(pid, self._first_sight(pid, ppid, cpu, at, before_start))
            if cpu > proc["series"][-1][1]:
                proc["series"].append((at, cpu))

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            self.sample()

    def stop(self) -> dict[int, dict[str, Any]]:
        self.done.set()
        self.join()
        self.sample()
        return self.procs


def read_clock(lines: list[dict[str, Any]]) -> dict[int, list[tuple[float, float, str]]]:
    """Per worker PID, its tests as (start, end, node id), in order."""
    runs: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    started: dict[tuple[int, str], float] = {}
    for line in sorted(lines, key=lambda r: r["t"]):
        key = (line["pid"], line["test"])
        if line["event"] == "start":
            started[key] = line["t"]
        elif key in started:
            runs[line["pid"]].append((started.pop(key), line["t"], line["test"]))
    return dict(runs)


def running_at(tests: list[tuple[float, float, str]], at: float) -> str:
    """The file of the test running at ``at``, or of the last one to start before it (a process that outlives its
    test, e.g. a module fixture's server between tests); ``OUTSIDE`` before the first."""
    current = OUTSIDE
    for start, _end, nodeid in tests:
        if start > at:
            break
        current = nodeid.split("::")[0]
    return current


def charge(procs: dict[int, dict[str, Any]], runs: dict[int, list[tuple[float, float, str]]]) -> dict[str, dict[str, float]]:
    """CPU seconds per test file and kind of process: each increase in a process's series goes to the test
    running then on the worker among its ancestors (a worker's own CPU to the test it ran)."""
    cost: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for pid, proc in procs.items():
        worker = pid if pid in runs else next((p for p in proc["chain"] if p in runs), None)
        kind = kind_of(proc["cmdline"])
        for (_, before), (at, cpu) in pairwise(proc["series"]):
            cost[OUTSIDE if worker is None else running_at(runs[worker], at)][kind] += cpu - before
    return {name: dict(kinds) for name, kinds in cost.items()}


def run_tier(command: list[str], clock: Path) -> dict[str, Any]:
    """Run one tier's command with the clock plugin loaded; its wall time, busy CPU and return code."""
    env = {**os.environ, CLOCK_ENV: str(clock), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get(
        "PYTHONPATH")])), "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} -p benchmarks.suite_clock".strip()}
    busy, start = busy_cpu_s(), time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return {"command": " ".join(command), "wall_s": round(time.monotonic() - start, 1),
            "busy_cpu_s": round(busy_cpu_s() - busy, 1), "returncode": done.returncode,
            **({"stderr_tail": done.stderr[-2000:]} if done.returncode else {})}


def commands(tiers: list[str], quick: bool) -> dict[str, list[str]]:
    """``make <tier>`` for each tier, as ``make test`` runs them; quick: the suite-layout unit tests in one process."""
    if quick:
        return {"unit": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "tests/unit/suite"]}
    return {tier: ["make", "--no-print-directory", tier] for tier in tiers}


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.split("\n\n")[0])
    p.add_argument("--tiers", default=",".join(TIERS), help="the tiers to run, in order (make test: unit,contract,e2e)")
    args = p.parse_args(argv)
    plan = commands(args.tiers.split(","), args.quick)
    result = start_result(NAME, args.quick, {"tiers": plan, "sample_s": SAMPLE_S, "target_s": TARGET_S})
    cores = result["machine"]["cpus_usable"]
    clock = Path(os.environ.get("TMPDIR", "/tmp")) / f"suite-clock-{os.getpid()}.jsonl"
    clock.unlink(missing_ok=True)
    sampler = Sampler()
    sampler.sample(before_start=True)
    sampler.start()
    tiers = {tier: run_tier(command, clock) for tier, command in plan.items()}
    procs = sampler.stop()
    lines = [json.loads(line) for line in clock.read_text().splitlines()] if clock.exists() else []
    clock.unlink(missing_ok=True)
    runs = read_clock(lines)
    cost = charge(procs, runs)
    wall = sum(t["wall_s"] for t in tiers.values())
    busy = sum(t["busy_cpu_s"] for t in tiers.values())
    sampled = sum(sum(kinds.values()) for kinds in cost.values())
    files = sorted(((name, {"cpu_s": round(sum(kinds.values()), 1), "wall_s": round(file_wall(runs, name), 1),
                            "by_kind": {k: round(v, 1) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}})
                    for name, kinds in cost.items()), key=lambda item: -item[1]["cpu_s"])
    result["results"] = {
        "tiers": {name: {**t, "floor_s": round(t["busy_cpu_s"] / cores, 1)} for name, t in tiers.items()},
        "wall_s": round(wall, 1), "busy_cpu_s": round(busy, 1), "floor_s": round(busy / cores, 1),
        "sampled_cpu_s": round(sampled, 1), "unsampled_cpu_s": round(busy - sampled, 1),
        "tests_clocked": sum(len(tests) for tests in runs.values()),
        "files": dict(files),
        "by_kind": {k: round(sum(f["by_kind"].get(k, 0.0) for _, f in files), 1) for k, _ in (*KINDS, ("other", ""))},
    }
    verdict = target("the tiers' wall time (make test's, issue 52)", wall, TARGET_S, unit="s",
                     note=f"busy CPU {busy:.0f} s over {cores} cores: a floor of {busy / cores:.0f} s")
    if verdict["verdict"] == MISS and busy / cores > TARGET_S:
        verdict["verdict"] = BOUNDED
    result["targets"] = [] if args.quick else [verdict]
    failed = [name for name, t in tiers.items() if t["returncode"]]
    if failed:
        result["note"] = f"tiers that failed: {', '.join(failed)} (their figures stand, the suite did not pass)"
    emit(result, args.out, [
        table("tiers: wall, busy CPU, and the floor it sets (busy CPU over the usable cores)",
              ["tier", "wall s", "busy CPU s", "floor s", "rc"],
              [[n, t["wall_s"], t["busy_cpu_s"], t["busy_cpu_s"] / cores, t["returncode"]] for n, t in tiers.items()]),
        table("CPU by kind of process (s)", ["kind", "CPU s"],
              [[k, v] for k, v in sorted(result["results"]["by_kind"].items(), key=lambda kv: -kv[1]) if v]),
        table("the 25 test files that cost most CPU", ["file", "CPU s", "wall s", "largest kinds"],
              [[n, f["cpu_s"], f["wall_s"], ", ".join(f"{k} {v:g}" for k, v in list(f["by_kind"].items())[:3])]
               for n, f in files[:25]])])
    return 1 if failed else 0


def file_wall(runs: dict[int, list[tuple[float, float, str]]], name: str) -> float:
    """The summed wall time of a file's tests (0 for ``OUTSIDE``)."""
    return sum(end - start for tests in runs.values() for start, end, nodeid in tests if nodeid.split("::")[0] == name)


if __name__ == "__main__":
    raise SystemExit(main())
