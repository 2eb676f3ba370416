"""Memory store: operation latency and file growth over a long episode, for three kinds of files.

One seeded sequence of operations (writes, READ, TAIL, SEARCH, COUNT against a few files) is
played against three stores that differ only in their file policy:

- ``free``: free files, every write an APPEND of a ``key: text`` line (no keyed upsert, no cap);
- ``keyed``: keyed files, every write an UPSERT of the same key and text (bounded key space);
- ``pruned``: free files with ``max_lines``/``prune_to``, every write an APPEND.

The three stores advance in lockstep (operation i on each, in rotating order) so that the
machine's load falls on all three alike and their ratios are comparable. Each store has a
journal outside its root, as the rollout runner sets it up. Reported: median and p95 latency
per operation type, final bytes and lines per file, size over the run, refusals, and the ratio
of latency in the last tenth of the run to the first tenth (does latency grow with file size?).
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from automem_dagster.memory import FilePolicy, Journal, MemoryStore, Op, OpName
from automem_dagster.memory.store import DEFAULT_LIMITS
from benchmarks.common import emit, parser, percentile, ratio, start_result, summary_ms, table, target

NAME = "memory_store"
FILES = ("map.txt", "events.txt", "notes.txt")
THINGS = ("tree", "water", "stone", "coal", "iron", "diamond", "table", "zombie", "skeleton", "lava", "sapling", "cow")
DIRECTIONS = ("north", "south", "east", "west", "northeast", "southwest")
GRID = 10
"""Keys are map cells ``x,y`` on a GRID x GRID map: a key space of GRID**2 per file."""
MAX_LINES, PRUNE_TO = 200, 100
MIX = (("write", 0.45), ("READ", 0.10), ("TAIL", 0.15), ("SEARCH", 0.20), ("COUNT", 0.10))
"""Share of each operation: writes dominate the LOG phase, reads the PLAN phase."""
WINDOW = 0.10
"""Start, middle and end windows, as a share of the run, for the latency growth ratios. The start
window sees fresh, small files; by the middle a bounded file has reached its bound, so end/middle
asks whether a file that stopped growing still gets slower."""
LATENCY_GROWTH_LIMIT = 1.5
FULL = {"ops": 10_000, "sample_every": 500, "seed": 0}
QUICK = {"ops": 600, "sample_every": 100, "seed": 0}


def policies() -> dict[str, tuple[FilePolicy, OpName]]:
    """Configuration name -> (policy of every file, the write operation)."""
    return {
        "free": (FilePolicy(), OpName.APPEND),
        "keyed": (FilePolicy(mode="keyed"), OpName.UPSERT),
        "pruned": (FilePolicy(max_lines=MAX_LINES, prune_to=PRUNE_TO), OpName.APPEND),
    }


def op_sequence(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` abstract operations; the same list is played in every configuration."""
    rng = random.Random(seed)
    kinds, weights = zip(*MIX, strict=True)
    sequence = []
    for i in range(n):
        kind = rng.choices(kinds, weights)[0]
        step: dict[str, Any] = {"kind": kind, "file": rng.choice(FILES)}
        if kind == "write":
            step["key"] = f"{rng.randrange(GRID)},{rng.randrange(GRID)}"
            step["text"] = f"{rng.choice(THINGS)} {rng.randint(1, 9)} steps {rng.choice(DIRECTIONS)}; seen at step {i}"
        elif kind == "TAIL":
            step["n"] = str(rng.randint(5, 20))
        elif kind in ("SEARCH", "COUNT"):
            step["keyword"] = rng.choice(THINGS) if rng.random() < 0.8 else f"{rng.randrange(GRID)},{rng.randrange(GRID)}"
        sequence.append(step)
    return sequence


def concrete(step: dict[str, Any], write_op: OpName) -> tuple[Op, str]:
    """The store operation and phase for one abstract step in one configuration."""
    f, kind = step["file"], step["kind"]
    if kind == "write":
        if write_op is OpName.UPSERT:
            return Op(OpName.UPSERT, f, (step["key"], step["text"])), "log"
        return Op(OpName.APPEND, f, (f"{step['key']}: {step['text']}",)), "log"
    if kind == "TAIL":
        return Op(OpName.TAIL, f, (step["n"],)), "plan"
    if kind in ("SEARCH", "COUNT"):
        return Op(OpName(kind), f, (step["keyword"],)), "plan"
    return Op(OpName.READ, f), "plan"


class Run:
    """One configuration's store and what was measured on it."""

    def __init__(self, name: str, root: Path, policy: FilePolicy, write_op: OpName) -> None:
        self.name, self.policy, self.write_op = name, policy, write_op
        self.store = MemoryStore(root / name / "files", journal=Journal(root / name / "journal.jsonl"))
        for f in FILES:
            self.store.init_file(f, "", policy)
        self.latencies: list[tuple[str, float]] = []   # (op type, seconds), in run order
        self.refusals: list[dict[str, Any]] = []
        self.growth: list[dict[str, Any]] = []
        self.most_lines: dict[str, int] = dict.fromkeys(FILES, 0)

    def play(self, index: int, step: dict[str, Any]) -> None:
        op, phase = concrete(step, self.write_op)
        started = time.perf_counter()
        result = self.store.execute(op, phase)
        self.latencies.append((op.name.value, time.perf_counter() - started))
        lines_after = self.store.journal.entries[-1].lines_after  # the store journals every operation
        if lines_after is not None:
            self.most_lines[op.file] = max(self.most_lines[op.file], lines_after)
        if not result.ok:
            self.refusals.append({"op_index": index, "op": op.name.value, "file": op.file, "reason": result.text[:200]})

    def sample(self, done: int) -> None:
        self.growth.append({"ops": done, **{f: self.size(f) for f in FILES}})

    def size(self, name: str) -> dict[str, int]:
        return {"bytes": (self.store.root / name).stat().st_size, "lines": len(self.store.read_text(name).splitlines())}

    def report(self) -> dict[str, Any]:
        n = len(self.latencies)
        w = max(1, int(n * WINDOW))
        windows = {"start": self.latencies[:w], "middle": self.latencies[n // 2 - w:n // 2], "end": self.latencies[-w:]}
        by_type: dict[str, list[float]] = defaultdict(list)
        for kind, seconds in self.latencies:
            by_type[kind].append(seconds)
        share = {kind: len(values) / n for kind, values in by_type.items()}
        medians = {name: _medians(window) for name, window in windows.items()}
        return {
            "policy": self.policy.describe(),
            "write_op": self.write_op.value,
            "latency_by_op": {kind: summary_ms(values) for kind, values in sorted(by_type.items())},
            "latency_all_ops": summary_ms([x for _, x in self.latencies]),
            "latency_growth": {
                "window_ops": w,
                # The same abstract operations fall in a window in every configuration, so these
                # compare across configurations (not across windows, whose mix of operations differs).
                "window_mean_ms": {name: sum(x for _, x in window) / len(window) * 1e3 for name, window in windows.items()},
                "median_ms_by_op": {name: {k: v * 1e3 for k, v in m.items()} for name, m in medians.items()},
                "end_over_start": _mix_ratio(medians["end"], medians["start"], share),
                "end_over_middle": _mix_ratio(medians["end"], medians["middle"], share),
                "end_over_start_by_op": {k: ratio(medians["end"].get(k, math.nan), medians["start"].get(k, math.nan))
                                         for k in sorted(by_type)},
            },
            "final": {f: self.size(f) for f in FILES},
            "final_total_bytes": sum(self.size(f)["bytes"] for f in FILES),
            "max_lines_seen": dict(self.most_lines),
            "refused_ops": len(self.refusals),
            "first_refusals": self.refusals[:3],
            "size_over_run": self.growth,
        }


def _medians(window: list[tuple[str, float]]) -> dict[str, float]:
    grouped: dict[str, list[float]] = defaultdict(list)
    for kind, seconds in window:
        grouped[kind].append(seconds)
    return {kind: percentile(values, 50) for kind, values in sorted(grouped.items())}


def _mix_ratio(later: dict[str, float], earlier: dict[str, float], share: dict[str, float]) -> float:
    """How much slower the later window is: per operation type the ratio of medians, combined as a
    geometric mean weighted by each type's share of the run, so a window that happens to hold more
    writes than another does not look slower for that reason."""
    kinds = [k for k in share if later.get(k, 0) > 0 and earlier.get(k, 0) > 0]
    if not kinds:
        return math.nan
    total = sum(share[k] for k in kinds)
    return math.exp(sum(share[k] / total * math.log(later[k] / earlier[k]) for k in kinds))


def run(ops: int, sample_every: int, seed: int) -> dict[str, dict[str, Any]]:
    sequence = op_sequence(ops, seed)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        runs = [Run(name, Path(tmp), policy, write_op) for name, (policy, write_op) in policies().items()]
        for i, step in enumerate(sequence):
            for k in range(len(runs)):  # rotate who goes first so no configuration always runs on a warm cache
                runs[(i + k) % len(runs)].play(i, step)
            if (i + 1) % sample_every == 0 or i + 1 == len(sequence):
                for r in runs:
                    r.sample(i + 1)
        return {r.name: r.report() for r in runs}


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=None, help=f"operations per configuration (default {FULL['ops']:,})")
    p.add_argument("--seed", type=int, default=None, help="seed of the operation sequence (default 0)")
    args = p.parse_args(argv)
    if args.ops is not None and args.ops < 20:
        p.error(f"--ops {args.ops}: give at least 20 operations, so that each tenth of the run holds some")
    settings = dict(QUICK if args.quick else FULL)
    if args.ops is not None:
        settings["ops"] = args.ops
        settings["sample_every"] = max(1, args.ops // 20)
    if args.seed is not None:
        settings["seed"] = args.seed
    settings |= {"files": list(FILES), "mix": dict(MIX), "key_space_per_file": GRID**2,
                 "max_lines": MAX_LINES, "prune_to": PRUNE_TO, "window_share": WINDOW,
                 "limits": DEFAULT_LIMITS.model_dump()}
    result = start_result(NAME, args.quick, settings)
    configs = run(settings["ops"], settings["sample_every"], settings["seed"])
    result["results"] = {"configurations": configs, "ratios": {
        "free_over_keyed_end_window_mean": ratio(_end_mean(configs["free"]), _end_mean(configs["keyed"])),
        "free_over_pruned_end_window_mean": ratio(_end_mean(configs["free"]), _end_mean(configs["pruned"])),
        "free_over_keyed_final_bytes": ratio(configs["free"]["final_total_bytes"], configs["keyed"]["final_total_bytes"]),
        "free_over_pruned_final_bytes": ratio(configs["free"]["final_total_bytes"], configs["pruned"]["final_total_bytes"]),
    }}
    keyed, pruned = configs["keyed"], configs["pruned"]
    result["targets"] = [
        target("keyed: most lines in a file <= its key space", max(keyed["max_lines_seen"].values()), GRID**2,
               unit="lines", source="proposed", note="a keyed file holds one line per key"),
        target("pruned: most lines in a file <= max_lines", max(pruned["max_lines_seen"].values()), MAX_LINES,
               unit="lines", source="proposed", note="the cap is enforced on every write"),
        target("keyed: median latency end/middle of the run", keyed["latency_growth"]["end_over_middle"],
               LATENCY_GROWTH_LIMIT, unit="x", source="proposed", note="a file at its bound should not keep getting slower"),
        target("pruned: median latency end/middle of the run", pruned["latency_growth"]["end_over_middle"],
               LATENCY_GROWTH_LIMIT, unit="x", source="proposed", note="a file at its bound should not keep getting slower"),
    ]
    emit(result, args.out, tables(result))
    return 0


def _end_mean(config: dict[str, Any]) -> float:
    return config["latency_growth"]["window_mean_ms"]["end"]


def tables(result: dict[str, Any]) -> list:
    configs = result["results"]["configurations"]
    kinds = sorted({k for c in configs.values() for k in c["latency_by_op"]})
    latency = table(
        f"latency per operation, ms (median / p95) over {result['settings']['ops']:,} ops",
        ["configuration", *kinds, "end/start", "end/middle"],
        [[name, *(_pair(c["latency_by_op"].get(k)) for k in kinds), c["latency_growth"]["end_over_start"],
          c["latency_growth"]["end_over_middle"]] for name, c in configs.items()],
    )
    size = table(
        "final size per file (bytes / lines)",
        ["configuration", *FILES, "total bytes", "refused ops"],
        [[name, *(f"{c['final'][f]['bytes']:,} / {c['final'][f]['lines']:,}" for f in FILES), c["final_total_bytes"],
          c["refused_ops"]] for name, c in configs.items()],
    )
    return [latency, size]


def _pair(stats: dict[str, float] | None) -> str:
    return "-" if stats is None else f"{stats['median_ms']:.3f} / {stats['p95_ms']:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
