"""Paired comparison of a candidate against the champion on the same fixed seeds, and the gate
policy its verdict is reached under.

Both agents play the same evaluation seeds, so the comparison is made on the per-seed
differences: a seed that is hard for both cancels out, which is what makes a handful of
episodes informative. Everything is reported in percent, like ``summarize_progression``.

The gates that judge these comparisons (``OUTCOMES``: kept, rolled back or inconclusive) are in
``metrics/verdict.py``; their policy (``GatePolicy``: which rule, its level, margins and seeds) is
here, with the metrics the equal_score gate may judge on (``GATE_METRICS``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from automem_dagster.metrics.progression import summarize_progression
from automem_dagster.metrics.resampling import bootstrap_interval, bootstrap_means, permutation_p_value
from automem_dagster.paired_comparison import PairedComparison

GATE_RULES = ("higher_mean", "significant", "equal_score")
OUTCOMES = ("kept", "rolled_back", "inconclusive")
"""What a gate answers: keep the candidate, roll it back, or inconclusive (the evidence cannot tell the two
apart at this budget; the champion stays)."""
GUARD_COLLAPSE = 0.5
"""equal_score keeps no saving bought by a guard (``behaviour.GUARDS``) below this share of the champion's."""
GATE_METRICS = ("input_tokens_per_step", "unproductive_action_rate", "redundant_write_rate", "empty_search_rate")
"""The ``BehaviourMetrics`` the equal_score gate can judge on; lower is better for each."""


@dataclass(frozen=True)
class GatePolicy:
    """How the gate judges a paired comparison (the rules: ``metrics/verdict.py``)."""

    rule: Literal["higher_mean", "significant", "equal_score"] = "significant"
    level: float = 0.05
    min_seeds: int = 5
    metric: str | None = None
    """equal_score only: the lower-is-better metric (one of ``GATE_METRICS``) a candidate may win on."""
    margin: float = 0.1
    """equal_score only: how far below 0 the progression difference's lower bound may be and still count
    as not worse, as a share of the champion's score (0.1: 10 %), and never less than the noise floor."""
    min_gain: float = 5.0
    """The smallest gain worth having, in progression points (5: about one Crafter achievement, 100/22
    points, on one seed of one): the significant gates roll back once the evidence rules it out, and an
    inconclusive verdict says how many seeds would detect it."""

    def __post_init__(self) -> None:
        if self.rule not in GATE_RULES:
            raise ValueError(f"gate rule {self.rule!r}: use one of {', '.join(GATE_RULES)}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"gate level {self.level}: a significance level between 0 and 1, e.g. 0.05")
        if self.min_seeds < 1:
            raise ValueError(f"gate min_seeds {self.min_seeds}: at least 1 paired seed")
        if self.rule == "equal_score" and self.metric not in GATE_METRICS:
            raise ValueError(f"gate metric {self.metric!r}: the equal_score gate needs one of {', '.join(GATE_METRICS)}")
        if self.rule != "equal_score" and self.metric is not None:
            raise ValueError(f"gate metric {self.metric!r} is read by the equal_score gate only, not {self.rule}: "
                             "drop the metric or choose equal_score")
        if not 0.0 <= self.margin < 1.0:
            raise ValueError(f"gate margin {self.margin}: a share of the champion's score, 0 or more and below 1 "
                             "(e.g. 0.1 for 10 %)")
        if self.min_gain <= 0:
            raise ValueError(f"gate min_gain {self.min_gain}: the smallest gain worth having, in points, above 0 "
                             "(e.g. 5)")

    def describe(self) -> str:
        if self.rule == "higher_mean":
            return "higher_mean (AutoMem's rule: a mean higher by more than the noise floor on the fixed seeds)"
        significant = (f"one-sided paired permutation p <= {self.level:g}, at least {self.min_seeds} seeds, beyond "
                       f"the noise floor; rolled back once a {self.min_gain:g}-point gain is ruled out")
        if self.rule == "significant":
            return f"significant ({significant})"
        return (f"equal_score (a significant gain, or progression not worse than {self.margin:.0%} of the champion's "
                f"score and {self.metric} lower, each route at half the level; {significant})")

    @property
    def decides_on(self) -> int:
        """The fewest seeds on which the gate keeps or rolls back at all: 1 for higher_mean; else
        ``min_seeds``, and enough for the permutation test to reach ``level`` (2**-n <= level)."""
        if self.rule == "higher_mean":
            return 1
        return max(self.min_seeds, math.ceil(math.log2(1.0 / self.level)))

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MetricComparison:
    """A lower-is-better metric (``GATE_METRICS``) of candidate and champion on the same seeds, and
    the one-sided lower bound of the progression difference, as the equal_score gate reads them."""

    metric: str
    candidate_mean: float
    champion_mean: float
    reduction: float
    """Mean over seeds of champion minus candidate: positive when the candidate is lower (better)."""
    p_value: float
    """One-sided paired permutation p-value of a reduction this large or larger by chance."""
    progression_lower_bound: float
    """The ``level / 2`` quantile of the bootstrapped mean progression difference, in points (the
    non-inferiority route tests at half the gate's level)."""
    n: int
    """Seeds the metric was read on: those where both sides have a denominator (``excluded``: the others)."""
    excluded: tuple[int, ...] = ()
    guards: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per guard (``behaviour.GUARDS``), the candidate's and the champion's value over the batch."""

    def collapsed(self) -> list[str]:
        """The guards the candidate let fall below ``GUARD_COLLAPSE`` of the champion's value."""
        return [f"{name} {mine:.3g} vs {champ:.3g}" for name, (mine, champ) in self.guards.items()
                if champ > 0 and mine < GUARD_COLLAPSE * champ]

    @property
    def relative_change(self) -> float | None:
        """The candidate's change against the champion, in percent of the champion (None from 0)."""
        return 100.0 * (self.candidate_mean - self.champion_mean) / self.champion_mean if self.champion_mean else None


def compare_metric(candidate: dict[int, float], champion: dict[int, float], candidate_metric: dict[int, float],
                   champion_metric: dict[int, float], policy: GatePolicy, n_resamples: int = 10_000,
                   rng_seed: int = 0, guards: dict[str, tuple[float, float]] | None = None) -> MetricComparison:
    """``policy.metric`` per seed (``*_metric``) beside the per-seed progressions, as ``MetricComparison``. A seed
    missing from either metric (a rate without a denominator there) is excluded from the metric's test, not
    read as 0; ``guards`` are the batches' ``GUARDS`` (candidate, champion)."""
    seeds = _paired_seeds(candidate, champion)
    stray = sorted((set(candidate_metric) | set(champion_metric)) - set(seeds))
    if stray:
        raise ValueError(f"{policy.metric} was measured on seeds {stray} the progression's seeds {seeds} do not "
                         "include: rerun the evaluation")
    read = [s for s in seeds if s in candidate_metric and s in champion_metric]
    reduction = np.array([champion_metric[s] - candidate_metric[s] for s in read])
    means = bootstrap_means(np.array([candidate[s] - champion[s] for s in seeds]), n_resamples, rng_seed)
    return MetricComparison(
        metric=policy.metric, candidate_mean=float(np.mean([candidate_metric[s] for s in read])) if read else 0.0,
        champion_mean=float(np.mean([champion_metric[s] for s in read])) if read else 0.0,
        reduction=float(reduction.mean()) if read else 0.0,
        p_value=permutation_p_value(reduction, rng_seed) if read else 1.0,
        progression_lower_bound=float(np.quantile(means, policy.level / 2)), n=len(read),
        excluded=tuple(s for s in seeds if s not in read), guards=dict(guards or {}))


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
    ci_low, ci_high = bootstrap_interval(np.subtract(cand, champ), n_resamples, confidence, rng_seed)
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
        p_worse=permutation_p_value(np.subtract(champ, cand), rng_seed),
    )


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
