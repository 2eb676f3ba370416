"""Resampling of per-seed differences: the paired permutation (sign-flip) test and the seed bootstrap
that the gates (``metrics.verdict``) read, and the paired change of any per-seed quantity built on them
(the paper's table, the noise floor of a gate's metric). Plain numpy, no policy: what a p-value or an
interval means for a keep is decided in ``paired``."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

TIE_TOLERANCE = 1e-9
"""Percentage points below which two means count as equal. Progressions are ratios such as
k/22 that floats cannot hold exactly, so two seed sets with the same real total can sum to
means an ulp apart; without a tolerance such a tie would be kept as a win."""
EXACT_PERMUTATION_MAX_SEEDS = 16
"""Up to this many seeds the permutation test enumerates all 2**n sign flips (65,536); above, it samples."""


def permutation_p_value(differences: np.ndarray, rng_seed: int = 0, n_samples: int = 20_000) -> float:
    """One-sided paired permutation (sign-flip) test of a positive mean difference.

    Under the null hypothesis that candidate and champion are exchangeable on every seed, each
    per-seed difference is as likely to have either sign; the p-value is the share of the 2**n
    sign assignments whose mean is at least the observed one (all of them up to
    ``EXACT_PERMUTATION_MAX_SEEDS`` seeds, else ``n_samples`` drawn with ``rng_seed``). With n
    seeds the smallest possible p-value is 2**-n: 5 seeds can reach 0.031, 4 seeds only 0.0625.
    Sampled, the observed assignment counts as one of the draws, ``(k + 1) / (n_samples + 1)``: a
    Monte Carlo p-value is then never 0 and never below what the test can resolve.
    """
    d = np.asarray(differences, dtype=float)
    observed = d.mean() - TIE_TOLERANCE / 100.0
    if len(d) <= EXACT_PERMUTATION_MAX_SEEDS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
        return float(np.mean((signs * d).mean(axis=1) >= observed))
    signs = np.random.default_rng(rng_seed).choice((1.0, -1.0), size=(n_samples, len(d)))
    return float((np.sum((signs * d).mean(axis=1) >= observed) + 1) / (n_samples + 1))


def bootstrap_means(differences: np.ndarray, n_resamples: int, rng_seed: int, scale: float = 100.0) -> np.ndarray:
    """Means of ``n_resamples`` resamples of the seeds (with replacement), times ``scale`` (percent)."""
    rng = np.random.default_rng(rng_seed)
    picks = rng.integers(0, len(differences), size=(n_resamples, len(differences)))
    return scale * differences[picks].mean(axis=1)


def bootstrap_interval(differences: np.ndarray, n_resamples: int, confidence: float, rng_seed: int,
                        scale: float = 100.0) -> tuple[float, float]:
    """Percentile bootstrap of the mean difference, times ``scale`` (percent): resample seeds, take quantiles."""
    means = bootstrap_means(differences, n_resamples, rng_seed, scale)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class PairedChange:
    """Any per-seed quantity after against before on the same seeds (the paper's table): means, the
    mean paired difference with its bootstrap interval, and a two-sided paired permutation p-value."""

    before: float
    after: float
    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int

    @property
    def relative_change(self) -> float | None:
        """The change in percent of ``before``; None when ``before`` is 0."""
        return 100.0 * self.difference / self.before if self.before else None


def paired_change(after: dict[int, float], before: dict[int, float], n_resamples: int = 10_000,
                  confidence: float = 0.95, rng_seed: int = 0) -> PairedChange:
    """``after`` against ``before`` (any unit, keyed by seed) on their common seeds, which must be all of them."""
    if not after or set(after) != set(before):
        raise ValueError(f"a paired change needs the same seeds on both sides (after: {sorted(after)}, before: "
                         f"{sorted(before)}): evaluate both on the fixed evaluation seeds")
    seeds = sorted(after)
    d = np.array([after[s] - before[s] for s in seeds], dtype=float)
    low, high = bootstrap_interval(d, n_resamples, confidence, rng_seed, scale=1.0)
    p = min(1.0, 2.0 * min(permutation_p_value(d, rng_seed), permutation_p_value(-d, rng_seed)))
    return PairedChange(float(np.mean([before[s] for s in seeds])), float(np.mean([after[s] for s in seeds])),
                        float(d.mean()), low, high, p, len(seeds))
