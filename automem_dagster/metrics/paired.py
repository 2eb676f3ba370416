"""Paired comparison of a candidate against the champion on the same fixed seeds, and the
keep-or-rollback decision that follows from it.

Both agents play the same evaluation seeds, so the comparison is made on the per-seed
differences: a seed that is hard for both cancels out, which is what makes a handful of
episodes informative. Everything is reported in percent, like ``summarize_progression``.

The decision rule is AutoMem's: a candidate is kept only if its mean progression on the
fixed seeds is strictly higher than the champion's. The standard error and the bootstrap
interval are recorded as evidence for a person reading the lineage; they do not change the
decision, because the rule the results were published under does not use them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from automem_dagster.metrics.progression import summarize_progression

TIE_TOLERANCE = 1e-9
"""Percentage points below which two means count as equal. Progressions are ratios such as
k/22 that floats cannot hold exactly, so two seed sets with the same real total can sum to
means an ulp apart; without a tolerance such a tie would be kept as a win."""


@dataclass(frozen=True)
class PairedComparison:
    """Candidate versus champion on the same seeds; every score is in percent.

    ``stderr_difference`` is the population standard deviation of the per-seed differences
    over sqrt(n): BALROG's standard-error convention, applied to the paired differences so
    it is comparable with the error bars of ``summarize_progression``. ``ci_low`` and
    ``ci_high`` bound the mean difference by a percentile bootstrap over seeds.
    """

    candidate_mean: float
    champion_mean: float
    mean_difference: float
    stderr_difference: float
    ci_low: float
    ci_high: float
    n: int
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Decision:
    """Whether the candidate replaces the champion, and a reason that quotes the numbers."""

    keep: bool
    reason: str
    comparison: PairedComparison


def compare_paired(
    candidate: dict[int, float],
    champion: dict[int, float],
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    rng_seed: int = 0,
) -> PairedComparison:
    """Compare per-seed progressions (in [0, 1], keyed by seed) of a candidate and the champion.

    The bootstrap draws seeds with replacement from a generator seeded with ``rng_seed`` so
    the same inputs always give the same interval, and a recorded decision can be recomputed.
    """
    seeds = _paired_seeds(candidate, champion)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (e.g. 0.95), got {confidence}")
    cand = [candidate[s] for s in seeds]
    champ = [champion[s] for s in seeds]
    differences = summarize_progression([c - h for c, h in zip(cand, champ, strict=True)])
    ci_low, ci_high = _bootstrap_interval(np.subtract(cand, champ), n_resamples, confidence, rng_seed)
    return PairedComparison(
        candidate_mean=summarize_progression(cand).mean,
        champion_mean=summarize_progression(champ).mean,
        mean_difference=differences.mean,
        stderr_difference=differences.stderr,
        ci_low=ci_low,
        ci_high=ci_high,
        n=len(seeds),
        seeds=tuple(seeds),
    )


def decide(comparison: PairedComparison) -> Decision:
    """Keep only a strictly higher mean; a tie or a loss rolls back (AutoMem's rule)."""
    c = comparison
    gap = c.candidate_mean - c.champion_mean
    evidence = (f"difference {c.mean_difference:+.2f} points, SE {c.stderr_difference:.2f}, "
                f"bootstrap CI [{c.ci_low:+.2f}, {c.ci_high:+.2f}], {c.n} paired seeds")
    if gap > TIE_TOLERANCE:
        reason = f"kept: candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}% ({evidence})"
        return Decision(keep=True, reason=reason, comparison=c)
    if gap >= -TIE_TOLERANCE:
        reason = (f"rolled back: tie, candidate and champion both average {c.champion_mean:.2f}% "
                  f"and a revision must be strictly better ({evidence})")
        return Decision(keep=False, reason=reason, comparison=c)
    reason = f"rolled back: candidate {c.candidate_mean:.2f}% is below champion {c.champion_mean:.2f}% ({evidence})"
    return Decision(keep=False, reason=reason, comparison=c)


def _paired_seeds(candidate: dict[int, float], champion: dict[int, float]) -> list[int]:
    """The common seeds, sorted; any mismatch means the two runs are not a paired comparison."""
    if not candidate or not champion:
        empty = [name for name, side in (("candidate", candidate), ("champion", champion)) if not side]
        raise ValueError(f"no seeds for the {' and '.join(empty)}: evaluate both on the fixed evaluation seeds")
    only_candidate = sorted(candidate.keys() - champion.keys())
    only_champion = sorted(champion.keys() - candidate.keys())
    if only_candidate or only_champion:
        raise ValueError(
            f"candidate and champion were evaluated on different seeds (only candidate: {only_candidate}, "
            f"only champion: {only_champion}): a paired comparison needs the same seeds on both sides"
        )
    for name, side in (("candidate", candidate), ("champion", champion)):
        bad = {s: v for s, v in side.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"{name} progressions must be in [0, 1] (fractions, not percent); seeds out of range: {bad}")
    return sorted(candidate)


def _bootstrap_interval(differences: np.ndarray, n_resamples: int, confidence: float, rng_seed: int) -> tuple[float, float]:
    """Percentile bootstrap of the mean difference, in percent: resample seeds, take quantiles."""
    rng = np.random.default_rng(rng_seed)
    picks = rng.integers(0, len(differences), size=(n_resamples, len(differences)))
    means = 100.0 * differences[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)
