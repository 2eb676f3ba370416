"""Replay at concurrency: does a batch played twice (same identity) repeat bit for bit at 1, 2 and 4 episodes at once?

Each level plays the same batch twice through ``automem rollout`` (a fresh embedded server per play, as
two runs of the CLI get) and compares the two plays the way the A/A record does (``loop.noise``: every
step's observation, action, reward, progression and every model turn's text, operations and tokens).
Reported per level: the seeds repeated exactly, the first step where each other seed parted, and the
wall time of a play, so the price of what makes replays repeat (one request at a time on the embedded
server, ``llm/serial.py``) can be read beside what it buys. ``--endpoints`` plays another endpoints
file (``embedded_serial: false`` in it turns the one-at-a-time rule off, for the comparison).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from automem_dagster.cli import main as cli_main
from automem_dagster.loop.noise import STEP_KEYS, TURN_KEYS
from automem_dagster.rollout.trajectory import finished_episodes, read_trajectory
from benchmarks.common import emit, parser, start_result, table

NAME = "replay_concurrency"
FULL = {"levels": "1,2,4", "seeds": "42-45", "max_steps": 6}
QUICK = {"levels": "1,2", "seeds": "42-43", "max_steps": 2}


def steps_by_seed(batch: Path) -> dict[int, list]:
    """Each finished episode's content as the A/A record compares it, by seed."""
    out = {}
    for path in finished_episodes(batch):
        header, steps, _ = read_trajectory(path)
        out[header["seed"]] = [([s.get(k) for k in STEP_KEYS], [[t.get(k) for k in TURN_KEYS] for t in s["turns"]])
                               for s in steps]
    return out


def first_divergence(a: list, b: list) -> int | None:
    """The first step where two plays of one seed differ (None: identical)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def play(out: Path, seeds: str, max_steps: int, concurrency: int, endpoints: str | None) -> float:
    started = time.perf_counter()
    argv = ["rollout", "--game", "crafter", "--seeds", seeds, "--rollout-max-steps", str(max_steps),
            "--concurrency", str(concurrency), "--out", str(out)]
    if endpoints:
        argv += ["--endpoints", endpoints]
    if cli_main(argv) != 0:
        raise SystemExit(f"the rollout into {out} failed: see its output above")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--levels", default=None, help=f"concurrency levels (default {FULL['levels']})")
    p.add_argument("--seeds", default=None, help=f"seeds (default {FULL['seeds']})")
    p.add_argument("--max-steps", type=int, default=None, help=f"steps per episode (default {FULL['max_steps']})")
    p.add_argument("--endpoints", default=None, help="endpoints file (default: the embedded model)")
    args = p.parse_args(argv)
    size = QUICK if args.quick else FULL
    levels = [int(x) for x in (args.levels or size["levels"]).split(",")]
    seeds, max_steps = args.seeds or size["seeds"], args.max_steps or size["max_steps"]
    result = start_result(NAME, args.quick, {"levels": levels, "seeds": seeds, "max_steps": max_steps,
                                             "endpoints": args.endpoints or "embedded", "game": "crafter"})
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        for level in levels:
            walls = [play(Path(tmp) / f"c{level}-{arm}", seeds, max_steps, level, args.endpoints) for arm in "ab"]
            a, b = (steps_by_seed(Path(tmp) / f"c{level}-{arm}") for arm in "ab")
            parted = {seed: first_divergence(a[seed], b.get(seed, [])) for seed in sorted(a)}
            rows.append({"concurrency": level, "seeds": len(parted),
                         "identical": sum(v is None for v in parted.values()),
                         "parted_at_step": {s: v for s, v in parted.items() if v is not None},
                         "wall_s": [round(w, 1) for w in walls]})
    result["results"] = rows
    result["targets"] = []
    emit(result, args.out, [table(f"A/A replays, crafter seeds {seeds} x {max_steps} steps",
                                  ["concurrency", "identical seeds", "parted at step (seed: step)", "wall s per play"],
                                  [[r["concurrency"], f"{r['identical']}/{r['seeds']}", r["parted_at_step"] or "-",
                                    r["wall_s"]] for r in rows])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
