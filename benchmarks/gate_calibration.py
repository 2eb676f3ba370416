"""Gate calibration: how often each gate keeps an A/A pair (a false keep) and how often it keeps a planted
gain of 1, 2 and 5 points (its power), by the number of paired seeds.

The A/A set is real per-seed results of two plays of one champion on the same seeds: by default the
recorded Crafter pair of docs/results.md (scaffold v0, 6 seeds, 10 steps, the embedded model: 0.76 %
on one run, one achievement of 22 on one seed, and 0.00 % on the other), or, with ``--plays``, two
batch folders of one identity (``automem noise`` leaves the champion's batch and its ``-replay-aa``).

Each draw resamples n seeds with replacement from the set, each seed bringing both of its plays, so
the play-to-play differences are the recorded ones; which play is the candidate is a coin flip (an
A/A pair has no direction). The gate's noise floor comes from a second, independent draw of n seeds
(``metrics.noise``), as a round's A/A evaluation would give it. A planted gain adds g points to every
seed of the candidate (capped at 100 %). ``equal_score`` reads input tokens per step, the same on both
sides here (the recorded batches kept no per-seed tokens), so only its progression routes are tried.

    .venv/bin/python -m benchmarks.gate_calibration [--quick] [--out FILE] [--draws 200] [--seeds 2 6 10 40]
                                                    [--plays BATCH REPLAY]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from automem_dagster.metrics.noise import noise_floor
from automem_dagster.metrics.paired import GatePolicy, compare_metric, compare_paired
from automem_dagster.metrics.verdict import gate_verdict
from benchmarks.common import emit, parser, start_result, table, target

ACHIEVEMENT = 1 / 22
RECORDED = ({42: ACHIEVEMENT, 43: 0.0, 44: 0.0, 45: 0.0, 46: 0.0, 47: 0.0}, dict.fromkeys(range(42, 48), 0.0))
"""docs/results.md: Crafter v0 on seeds 42-47 at 10 steps, scored 0.76 % then 0.00 % (the seed of the one
achievement is not recorded; 42 stands for it, which the resampling makes immaterial)."""
GATES = (GatePolicy("higher_mean"), GatePolicy("significant"),
         GatePolicy("equal_score", metric="input_tokens_per_step"))
GAINS = (0.0, 1.0, 2.0, 5.0)
RESAMPLES = 2000


def recorded_plays(folders: list[Path]) -> tuple[dict[int, float], dict[int, float]]:
    """Per-seed progressions of two plays from batch folders (``--plays``), on their common seeds."""
    from automem_dagster.loop.gate import per_seed
    from automem_dagster.rollout.summary import load_summary

    first, replay = (per_seed(load_summary(Path(f))) for f in folders[:2])
    common = sorted(set(first) & set(replay))
    if not common:
        raise SystemExit(f"--plays {folders[0]} and {folders[1]} share no finished seed")
    return {s: first[s] for s in common}, {s: replay[s] for s in common}


def draw(plays: tuple[dict[int, float], dict[int, float]], n: int, rng: np.random.Generator):
    """n seeds with replacement, each with both its plays, keyed 0..n-1; the candidate's play by coin flip."""
    seeds = rng.choice(sorted(plays[0]), size=n)
    a, b = ({i: side[s] for i, s in enumerate(seeds)} for side in plays)
    return (a, b) if rng.random() < 0.5 else (b, a)


def verdicts(candidate: dict[int, float], champion: dict[int, float], floor: float) -> dict[str, bool]:
    """Whether each gate keeps ``candidate`` against ``champion`` under ``floor``: one comparison for all."""
    comparison = compare_paired(candidate, champion, n_resamples=RESAMPLES)
    flat = dict.fromkeys(candidate, 2000.0)
    kept = {}
    for gate in GATES:
        metric = compare_metric(candidate, champion, flat, flat, gate, n_resamples=RESAMPLES) if gate.metric else None
        kept[gate.rule] = gate_verdict(comparison, gate, metric, floor=floor).keep
    return kept


def calibrate(plays, seed_counts: list[int], draws: int, rng_seed: int = 0) -> list[dict]:
    """One row per (gate, seeds): the share of ``draws`` kept at each planted gain (0: the A/A false-keep rate)."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for n in seed_counts:
        counts = {(g.rule, gain): 0 for g in GATES for gain in GAINS}
        for _ in range(draws):
            candidate, champion = draw(plays, n, rng)
            floor = noise_floor(*draw(plays, n, rng)).points
            for gain in GAINS:
                planted = {s: min(v + gain / 100, 1.0) for s, v in candidate.items()}
                for rule, keep in verdicts(planted, champion, floor).items():
                    counts[(rule, gain)] += keep
        rows += [{"gate": g.rule, "seeds": n, **{f"{gain:g}": counts[(g.rule, gain)] / draws for gain in GAINS}}
                 for g in GATES]
    return rows


def main(argv: list[str] | None = None) -> int:
    p = parser("gate_calibration", __doc__.split("\n\n")[0])
    p.add_argument("--draws", type=int, default=200, help="resampled pairs per gate and seed count (quick: 20)")
    p.add_argument("--seeds", type=int, nargs="+", default=[2, 6, 10, 40], help="paired seeds per draw (quick: 2 10)")
    p.add_argument("--plays", type=Path, nargs=2, default=None,
                   help="two batch folders of one identity (default: the recorded Crafter v0 pair)")
    args = p.parse_args(argv)
    draws, seeds = (20, [2, 10]) if args.quick else (args.draws, args.seeds)
    plays = recorded_plays(args.plays) if args.plays else RECORDED
    source = f"plays {args.plays[0]} and {args.plays[1]}" if args.plays else "recorded Crafter v0 A/A pair (docs/results.md)"
    result = start_result("gate_calibration", args.quick, {"draws": draws, "seeds": seeds, "a_a_set": source,
                                                           "a_a_seeds": len(plays[0])})
    rows = calibrate(plays, seeds, draws)
    result["results"]["rows"] = rows
    result["targets"] = [target(f"{r['gate']} A/A false keeps, {r['seeds']} seeds", r["0"], 0.05,
                                unit="share", source="issue 42") for r in rows if r["gate"] != "higher_mean"]
    emit(result, args.out, [table(f"keeps per draw ({draws} draws per row; A/A set: {source})",
                                  ["gate", "paired seeds", "A/A false keeps", "+1 point", "+2 points", "+5 points"],
                                  [[r["gate"], r["seeds"], r["0"], r["1"], r["2"], r["5"]] for r in rows])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
