"""What every benchmark shares: the command line, the machine record, statistics, target verdicts, output.

A benchmark builds a result with ``start_result``, adds its figures and ``target`` verdicts,
and hands it to ``emit``, which prints the JSON on stdout (so ``> result.json`` captures it
cleanly), writes it to ``--out`` atomically when asked, and prints the human tables on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from automem_dagster.atomic import write_json_atomic

PASS, MISS = "PASS", "MISS"


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
    result["verdict"] = (MISS if MISS in verdicts else PASS) if verdicts else "no targets"
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


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan


def _round(x: float, digits: int = 4) -> float:
    return x if math.isnan(x) else round(x, digits)


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
