"""Paired comparison of a candidate against the champion on the same fixed seeds, and the
keep-or-rollback decision that follows from it.

Both agents play the same evaluation seeds, so the comparison is made on the per-seed
differences: a seed that is hard for both cancels out, which is what makes a handful of
episodes informative. Everything is reported in percent, like ``summarize_progression``.

Two gate policies (``GatePolicy``), chosen per round and recorded with the decision:

- ``higher_mean`` (the default, AutoMem's published rule): keep a candidate whose mean
  progression on the fixed seeds is strictly higher than the champion's. The standard error,
  the bootstrap interval and the permutation p-value are recorded as evidence only.
- ``significant``: keep only when the paired difference is positive beyond chance: at least
  ``min_seeds`` paired seeds, and a one-sided paired permutation test (sign flips of the per-seed
  differences) with p <= ``level``. Noise such as one lucky piece of wood on 2 seeds is then
  rolled back instead of kept.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from automem_dagster.metrics.progression import summarize_progression

TIE_TOLERANCE = 1e-9
"""Percentage points below which two means count as equal. Progressions are ratios such as
k/22 that floats cannot hold exactly, so two seed sets with the same real total can sum to
means an ulp apart; without a tolerance such a tie would be kept as a win."""


GATE_RULES = ("higher_mean", "significant")
EXACT_PERMUTATION_MAX_SEEDS = 16
"""Up to this many seeds the permutation test enumerates all 2**n sign flips (65,536); above, it samples."""


@dataclass(frozen=True)
class GatePolicy:
    """How keep-or-rollback judges a paired comparison; see the module docstring for the two rules."""

    rule: Literal["higher_mean", "significant"] = "higher_mean"
    level: float = 0.05
    min_seeds: int = 5

    def __post_init__(self) -> None:
        if self.rule not in GATE_RULES:
            raise ValueError(f"gate rule {self.rule!r}: use one of {', '.join(GATE_RULES)}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"gate level {self.level}: a significance level between 0 and 1, e.g. 0.05")
        if self.min_seeds < 1:
            raise ValueError(f"gate min_seeds {self.min_seeds}: at least 1 paired seed")

    def describe(self) -> str:
        if self.rule == "higher_mean":
            return "higher_mean (strictly higher mean on the fixed seeds)"
        return f"significant (one-sided paired permutation p <= {self.level:g}, at least {self.min_seeds} seeds)"

    def as_dict(self) -> dict:
        return asdict(self)


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
    p_value: float = 1.0
    """One-sided paired permutation p-value of a mean difference this large or larger by chance."""


@dataclass(frozen=True)
class GateDecision:
    """Whether the candidate replaces the champion, and a reason that quotes the numbers."""

    keep: bool
    reason: str
    comparison: PairedComparison
    policy: GatePolicy = field(default_factory=GatePolicy)


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
        p_value=permutation_p_value(np.subtract(cand, champ), rng_seed),
    )


def decide(comparison: PairedComparison, policy: GatePolicy | None = None) -> GateDecision:
    """Keep or roll back under ``policy`` (default: AutoMem's strictly-higher-mean rule); a tie or a
    loss always rolls back, and ``significant`` also rolls back a win that chance explains."""
    policy = policy or GatePolicy()
    c = comparison
    gap = c.candidate_mean - c.champion_mean
    evidence = (f"difference {c.mean_difference:+.2f} points, SE {c.stderr_difference:.2f}, "
                f"bootstrap CI [{c.ci_low:+.2f}, {c.ci_high:+.2f}], permutation p {c.p_value:.3f}, "
                f"{c.n} paired seeds; gate {policy.rule}")
    if gap > TIE_TOLERANCE:
        if policy.rule == "significant" and c.n < policy.min_seeds:
            reason = (f"rolled back: candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}% on only "
                      f"{c.n} seeds, and the significant gate needs at least {policy.min_seeds} ({evidence})")
            return GateDecision(keep=False, reason=reason, comparison=c, policy=policy)
        if policy.rule == "significant" and c.p_value > policy.level:
            reason = (f"rolled back: candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}%, but "
                      f"chance explains it (p {c.p_value:.3f} > {policy.level:g}) ({evidence})")
            return GateDecision(keep=False, reason=reason, comparison=c, policy=policy)
        reason = f"kept: candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}% ({evidence})"
        return GateDecision(keep=True, reason=reason, comparison=c, policy=policy)
    if gap >= -TIE_TOLERANCE:
        reason = (f"rolled back: tie, candidate and champion both average {c.champion_mean:.2f}% "
                  f"and the gate keeps only a strictly higher score ({evidence})")
        return GateDecision(keep=False, reason=reason, comparison=c, policy=policy)
    reason = f"rolled back: candidate {c.candidate_mean:.2f}% is below champion {c.champion_mean:.2f}% ({evidence})"
    return GateDecision(keep=False, reason=reason, comparison=c, policy=policy)


def permutation_p_value(differences: np.ndarray, rng_seed: int = 0, n_samples: int = 20_000) -> float:
    """One-sided paired permutation (sign-flip) test of a positive mean difference.

    Under the null hypothesis that candidate and champion are exchangeable on every seed, each
    per-seed difference is as likely to have either sign; the p-value is the share of the 2**n
    sign assignments whose mean is at least the observed one (all of them up to
    ``EXACT_PERMUTATION_MAX_SEEDS`` seeds, else ``n_samples`` drawn with ``rng_seed``). With n
    seeds the smallest possible p-value is 2**-n: 5 seeds can reach 0.031, 4 seeds only 0.0625.
    """
    d = np.asarray(differences, dtype=float)
    observed = d.mean() - TIE_TOLERANCE / 100.0
    if len(d) <= EXACT_PERMUTATION_MAX_SEEDS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
    else:
        signs = np.random.default_rng(rng_seed).choice((1.0, -1.0), size=(n_samples, len(d)))
    return float(np.mean((signs * d).mean(axis=1) >= observed))


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
