"""What every benchmark shares: the command line, the machine record, statistics, target verdicts, output,
and for the benchmarks that play real rollouts: running batches, reading their step records, per-step cost
figures and the growth of a per-step series over an episode.

A benchmark builds a result with ``start_result``, adds its figures and ``target`` verdicts,
and hands it to ``emit``, which prints the JSON on stdout (so ``> result.json`` captures it
cleanly), writes it to ``--out`` atomically when asked, and prints the human tables on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from automem_dagster.atomic import write_json_atomic
from automem_dagster.cpu_ledger import PHASES, REST
from automem_dagster.metrics.behaviour import uncached_tokens

if TYPE_CHECKING:  # the rollout helpers import these when called, so model-free benchmarks stay light
    from automem_dagster.llm.config import EndpointsConfig
    from automem_dagster.rollout import RolloutSpec
    from automem_dagster.scaffold import Scaffold

PASS, MISS = "PASS", "MISS"
BOUNDED = "bounded by CPU"
"""A target this machine's cores cannot reach at the measured CPU cost: neither a pass nor, alone, a miss of the
code (``rollout_scaling``'s shard speed-up). A result with one is not a PASS."""


def parser(name: str, description: str) -> argparse.ArgumentParser:
    """The options every benchmark takes; a benchmark adds its own after these."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=description)
    p.add_argument("--quick", action="store_true", help="small settings that finish in seconds (checks that it works)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON result to this file")
    return p


def machine_info() -> dict[str, Any]:
    """The machine a result was measured on; load matters because ratios are only comparable within a run."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "load_average_1_5_15": load,
    }


def start_result(name: str, quick: bool, settings: dict[str, Any]) -> dict[str, Any]:
    """A result skeleton; ``finish_result`` stamps the duration and the load at the end."""
    return {
        "benchmark": name,
        "quick": quick,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "settings": settings,
        "results": {},
        "targets": [],
        "_t0": time.perf_counter(),
    }


def finish_result(result: dict[str, Any]) -> dict[str, Any]:
    result["duration_s"] = round(time.perf_counter() - result.pop("_t0"), 2)
    result["machine"]["load_average_at_end"] = machine_info()["load_average_1_5_15"]
    verdicts = [t["verdict"] for t in result["targets"]]
    worst = next((v for v in (MISS, BOUNDED) if v in verdicts), PASS)
    result["verdict"] = worst if verdicts else "no targets"
    return result


_COMPARE = {
    "<=": lambda v, limit: v <= limit,
    "<": lambda v, limit: v < limit,
    ">=": lambda v, limit: v >= limit,
    ">": lambda v, limit: v > limit,
}


def target(name: str, value: float | None, limit: float, comparison: str = "<=", *, unit: str = "",
           source: str = "issue", note: str = "") -> dict[str, Any]:
    """One target, ``value <comparison> limit``, with its verdict. A value that could not be measured
    is a MISS, never a pass.

    ``source`` says who set the target: ``issue`` (the task that asked for the benchmark) or
    ``proposed`` (this benchmark's own expectation, e.g. a guarantee of the design).
    """
    ok = value is not None and math.isfinite(value) and _COMPARE[comparison](value, limit)
    return {
        "name": name,
        "value": None if value is None else round(float(value), 6),
        "limit": limit,
        "comparison": comparison,
        "unit": unit,
        "verdict": PASS if ok else MISS,
        "source": source,
        **({"note": note} if note else {}),
    }


# --- statistics ------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """Count, median, p95 and mean of durations given in seconds, reported in milliseconds."""
    return {
        "n": len(seconds),
        "median_ms": _round(percentile(seconds, 50) * 1e3),
        "p95_ms": _round(percentile(seconds, 95) * 1e3),
        "mean_ms": _round(sum(seconds) / len(seconds) * 1e3) if seconds else math.nan,
    }


def process_stat(pid: int) -> tuple[int, float]:
    """(parent PID, user plus system CPU seconds so far) of process ``pid``, from ``/proc/<pid>/stat`` (Linux; the
    command name in it may hold spaces and parentheses). Raises ``OSError`` for a process that is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan


def summary_stats(values: Sequence[float]) -> dict[str, float | int]:
    """Count, mean, median, p95 and max of plain values (tokens, seconds), unscaled."""
    return {
        "n": len(values),
        "mean": _round(sum(values) / len(values)) if values else math.nan,
        "median": _round(percentile(values, 50)),
        "p95": _round(percentile(values, 95)),
        "max": _round(max(values)) if values else math.nan,
    }


def _round(x: float, digits: int = 4) -> float:
    return x if math.isnan(x) else round(x, digits)


# --- rollouts --------------------------------------------------------------------------------

def load_scaffold_ref(game: str, ref: str) -> Scaffold:
    """A scaffold given as a version of ``game``'s family (``v0``, ``3``) or as a YAML file."""
    from automem_dagster.games import game_family
    from automem_dagster.paths import SCAFFOLDS
    from automem_dagster.scaffold import load_scaffold, load_scaffold_file

    if ref.removeprefix("v").isdigit():
        return load_scaffold(game_family(game), ref, SCAFFOLDS)
    return load_scaffold_file(Path(ref))


async def _play(specs: Sequence[RolloutSpec], config: EndpointsConfig, log_dir: Path) -> dict[str, Any]:
    from automem_dagster.agent.memory_settings import needs_embed
    from automem_dagster.llm.session import connect
    from automem_dagster.rollout import run_batch

    started = time.perf_counter()
    async with connect(config, log_dir, embed=any(needs_embed(s.agent, s.settings) for s in specs)) as clients:
        connected = time.perf_counter()
        elapsed = []
        for spec in specs:
            t0 = time.perf_counter()
            await run_batch(spec, clients)
            elapsed.append(time.perf_counter() - t0)
    return {"connect_s": connected - started, "elapsed_s": elapsed}


def run_batches(specs: Sequence[RolloutSpec], config: EndpointsConfig, log_dir: Path) -> dict[str, Any]:
    """Play the batches one after the other on one connection (one embedded server, started here when
    ``config`` names it and stopped at the end; with embeddings on when a ``rag`` batch searches by them).
    ``connect_s``: seconds to connect (the server's start);
    ``elapsed_s``: each batch end to end (episode setup, trajectory files and summary included)."""
    return asyncio.run(_play(specs, config, log_dir))


def batch_episodes(batch: Path) -> list[list[dict[str, Any]]]:
    """The step records of each finished episode of a batch, in file order."""
    from automem_dagster.rollout import read_trajectory

    return [read_trajectory(path)[1] for path in sorted((Path(batch) / "trajectories").glob("*.jsonl"))]


def step_tokens(step: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens of one step: the sum over its model calls (LOG turns and PLAN turns)."""
    return sum(t["input_tokens"] for t in step["turns"]), sum(t["output_tokens"] for t in step["turns"])


def cost_figures(episodes: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """What the steps of a batch cost: tokens per step (summed over the step's calls) and per call, the
    uncached input tokens per step (as the server reported its cache), model calls per step by phase,
    malformed turns, wall seconds per step, the valid-action rate and tokens per episode."""
    steps = [s for ep in episodes for s in ep]
    tokens = [step_tokens(s) for s in steps]
    turns = [t for s in steps for t in s["turns"]]
    phases = sorted({t["phase"] for t in turns})
    n, calls = len(steps), len(turns)
    per_episode = [sum(sum(step_tokens(s)) for s in ep) for ep in episodes]
    return {
        "episodes": len(episodes),
        "steps": n,
        "model_calls": calls,
        "model_calls_per_step": ratio(calls, n),
        "calls_per_step_by_phase": {p: ratio(sum(t["phase"] == p for t in turns), n) for p in phases},
        "input_tokens_per_step": summary_stats([i for i, _ in tokens]),
        "uncached_input_tokens_per_step": summary_stats([sum(uncached_tokens(t) for t in s["turns"]) for s in steps]),
        "calls_with_cache_report": ratio(sum(t.get("cached_tokens") is not None for t in turns), calls),
        "retried_calls": sum(t.get("attempts", 1) > 1 for t in turns),
        "malformed_turns_per_step": ratio(sum(bool(t["errors"]) for t in turns), n),
        "output_tokens_per_step": summary_stats([o for _, o in tokens]),
        "input_tokens_per_step_by_phase": {p: ratio(sum(t["input_tokens"] for t in turns if t["phase"] == p), n)
                                           for p in phases},
        "output_tokens_per_step_by_phase": {p: ratio(sum(t["output_tokens"] for t in turns if t["phase"] == p), n)
                                            for p in phases},
        "input_tokens_per_call": summary_stats([t["input_tokens"] for t in turns]),
        "output_tokens_per_call": summary_stats([t["output_tokens"] for t in turns]),
        "wall_s_per_step": summary_stats([s["wall_s"] for s in steps]),
        "model_s_per_step": summary_stats([sum(t["latency_s"] for t in s["turns"]) for s in steps]),
        "valid_action_rate": ratio(sum(bool(s["action_valid"]) for s in steps), n),
        "total_tokens_per_episode": summary_stats(per_episode),
    }


def phases_text(per_phase: dict[str, float]) -> str:
    """``{"log": 0.75, "plan": 2.0}`` as ``log 0.75, plan 2``, for table titles."""
    return ", ".join(f"{phase} {value:.3g}" for phase, value in per_phase.items())


def by_step_index(episodes: Sequence[Sequence[dict[str, Any]]], value) -> list[list[float]]:
    """``value(step)`` of every step, grouped by step index: item i holds one value per episode that reached step i."""
    out: list[list[float]] = []
    for ep in episodes:
        for i, step in enumerate(ep):
            if i == len(out):
                out.append([])
            out[i].append(value(step))
    return out


def index_means(series: Sequence[Sequence[float]]) -> list[float]:
    """The mean over episodes at each step index."""
    return [sum(v) / len(v) for v in series]


GROWTH_SLOPE_LIMIT = 0.25
GROWTH_QUARTER_LIMIT = 1.25
GROWTH_RULE = (
    "flat over the episode: the least-squares slope of per-step input tokens against step index, over all steps of "
    f"all episodes, times the episode length L (step indices played), is under {GROWTH_SLOPE_LIMIT:g} of the mean "
    f"(slope * L / mean < {GROWTH_SLOPE_LIMIT:g}); and the mean of the last quarter of step indices (the last "
    f"max(1, L // 4)) over the mean of the first quarter is at most {GROWTH_QUARTER_LIMIT:g}"
)
"""The rule for 'no linear growth', stated in the JSON and in benchmarks/README.md."""


def growth(series: Sequence[Sequence[float]]) -> dict[str, Any]:
    """How a per-step figure grows with the step index; ``series`` as ``by_step_index`` gives it.

    Slope: least squares over every (index, value) point. ``slope_times_steps_over_mean``: how much of the
    mean a linear trend adds over the whole episode. Quarters: the last ``max(1, L // 4)`` indices against
    the first as many, pooling every episode's values at those indices. NaN where it cannot be measured
    (fewer than two step indices, or a zero mean), which a target counts as a MISS."""
    points = [(i, v) for i, values in enumerate(series) for v in values]
    length = len(series)
    nan = math.nan
    if not points:
        return {"steps": 0, "points": 0, "mean": nan, "slope_per_step": nan, "slope_times_steps_over_mean": nan,
                "quarter_steps": 0, "first_quarter_mean": nan, "last_quarter_mean": nan, "last_over_first_quarter": nan}
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx if sxx else nan
    q = max(1, length // 4)
    first = [v for values in series[:q] for v in values]
    last = [v for values in series[length - q:] for v in values]
    first_mean, last_mean = sum(first) / len(first), sum(last) / len(last)
    return {
        "steps": length,
        "points": len(points),
        "mean": mean_y,
        "slope_per_step": slope,
        "slope_times_steps_over_mean": ratio(slope * length, mean_y) if length > 1 else nan,
        "quarter_steps": q,
        "first_quarter_mean": first_mean,
        "last_quarter_mean": last_mean,
        "last_over_first_quarter": ratio(last_mean, first_mean) if length > 1 else nan,
    }


def growth_targets(label: str, g: dict[str, Any], source: str = "issue") -> list[dict[str, Any]]:
    """The two targets of ``GROWTH_RULE`` for one series."""
    return [
        target(f"{label}: input tokens per step, slope * steps / mean", g["slope_times_steps_over_mean"],
               GROWTH_SLOPE_LIMIT, "<", unit="of mean", source=source, note=GROWTH_RULE),
        target(f"{label}: input tokens per step, last / first quarter of the episode", g["last_over_first_quarter"],
               GROWTH_QUARTER_LIMIT, "<=", unit="x", source=source, note=GROWTH_RULE),
    ]


# --- output ----------------------------------------------------------------------------------

def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A rich table; numbers are formatted compactly, the first column left-aligned."""
    t = Table(title=title)
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*(_cell(v) for v in row))
    return t


def targets_table(targets: Sequence[dict[str, Any]]) -> Table:
    if not targets:
        return table("targets", ["target"], [["none set for this benchmark"]])
    rows = [[t["name"], t["value"], f"{t['comparison']} {t['limit']:g} {t['unit']}".strip(), t["verdict"], t["source"]]
            for t in targets]
    return table("targets", ["target", "measured", "target", "verdict", "set by"], rows)


def cpu_breakdown_table(first_column: str, rows: dict[Any, dict[str, float]]) -> Table:
    """Each row's ``cpu_ledger`` breakdown (``cpu_ms_per_step``, as ``Spent.per_step_ms`` gives it), one table
    for both harness benchmarks (``rollout_scaling``, ``harness_overhead``)."""
    columns = [*PHASES, REST, "harness"]
    return table(f"CPU ms per step by phase (cpu_ledger; {REST}: the process's CPU no phase holds; harness: all but game)",
                 [first_column, *columns], [[name, *(ms.get(c) for c in columns)] for name, ms in rows.items()])


def emit(result: dict[str, Any], out: Path | None, tables: Sequence[Table]) -> dict[str, Any]:
    """Finish the result, print its JSON on stdout, write ``out`` atomically, print the tables on stderr."""
    finish_result(result)
    result = clean(result)
    print(json.dumps(result, indent=2, default=str))
    if out is not None:
        write_json_atomic(out, result)
    console = Console(stderr=True, width=max(140, Console(stderr=True).width))
    m = result["machine"]
    console.print(f"[bold]{result['benchmark']}[/bold]{' (quick)' if result['quick'] else ''}: {m['platform']}, "
                  f"{m['cpus_usable']} usable CPUs, Python {m['python']}, load {m['load_average_1_5_15']}, "
                  f"{result['duration_s']} s")
    for t in [*tables, targets_table(result["targets"])]:
        console.print(t)
    if out is not None:
        console.print(f"result: {out}")
    sys.stdout.flush()
    return result


def clean(value: Any) -> Any:
    """The value with NaN and infinities replaced by None, so the output is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
