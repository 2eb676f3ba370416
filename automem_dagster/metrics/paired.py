"""Paired comparison of a candidate against the champion on the same fixed seeds, and the
keep-or-rollback decision that follows from it.

Both agents play the same evaluation seeds, so the comparison is made on the per-seed
differences: a seed that is hard for both cancels out, which is what makes a handful of
episodes informative. Everything is reported in percent, like ``summarize_progression``.

Three gate policies (``GatePolicy``), chosen per round and recorded with the decision:

- ``higher_mean`` (the default, AutoMem's published rule): keep a candidate whose mean
  progression on the fixed seeds is strictly higher than the champion's. The standard error,
  the bootstrap interval and the permutation p-value are recorded as evidence only.
- ``significant``: keep only when the paired difference is positive beyond chance: at least
  ``min_seeds`` paired seeds, and a one-sided paired permutation test (sign flips of the per-seed
  differences) with p <= ``level``. Noise such as one lucky piece of wood on 2 seeds is then
  rolled back instead of kept.
- ``equal_score`` (opt-in): what ``significant`` keeps, and also a candidate whose progression is
  not worse (the one-sided ``1 - level`` bootstrap lower bound of the paired difference is above
  ``-margin`` points) while a named cost or behaviour metric (``GATE_METRICS``, lower is better) is
  lower beyond chance on the same seeds (one-sided paired permutation p <= ``level``). A scaffold
  that plays as well with fewer prompt tokens or fewer redundant writes is then kept, where the
  paper's rule calls it a tie. At least ``min_seeds`` seeds, as for ``significant``.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from automem_dagster.metrics.progression import summarize_progression
from automem_dagster.paired_comparison import PairedComparison

TIE_TOLERANCE = 1e-9
"""Percentage points below which two means count as equal. Progressions are ratios such as
k/22 that floats cannot hold exactly, so two seed sets with the same real total can sum to
means an ulp apart; without a tolerance such a tie would be kept as a win."""


GATE_RULES = ("higher_mean", "significant", "equal_score")
GATE_METRICS = ("input_tokens_per_step", "unproductive_action_rate", "redundant_write_rate", "empty_search_rate")
"""The ``BehaviourMetrics`` the equal_score gate can judge on; lower is better for each."""
EXACT_PERMUTATION_MAX_SEEDS = 16
"""Up to this many seeds the permutation test enumerates all 2**n sign flips (65,536); above, it samples."""


@dataclass(frozen=True)
class GatePolicy:
    """How keep-or-rollback judges a paired comparison; see the module docstring for the two rules."""

    rule: Literal["higher_mean", "significant", "equal_score"] = "higher_mean"
    level: float = 0.05
    min_seeds: int = 5
    metric: str | None = None
    """equal_score only: the lower-is-better metric (one of ``GATE_METRICS``) a candidate may win on."""
    margin: float = 5.0
    """equal_score only: how many progression points worse the lower bound may be and still count as
    not worse (5: about one Crafter achievement, 100/22 points, on one seed of one)."""

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
        if self.margin < 0:
            raise ValueError(f"gate margin {self.margin}: progression points, 0 or more (e.g. 5)")

    def describe(self) -> str:
        if self.rule == "higher_mean":
            return "higher_mean (strictly higher mean on the fixed seeds)"
        significant = f"one-sided paired permutation p <= {self.level:g}, at least {self.min_seeds} seeds"
        if self.rule == "significant":
            return f"significant ({significant})"
        return (f"equal_score (a significant gain, or progression not worse than -{self.margin:g} points at the "
                f"one-sided {1 - self.level:.0%} bound and {self.metric} lower with {significant})")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GateVerdict:
    """Whether the candidate replaces the champion, and a reason that quotes the numbers."""

    keep: bool
    reason: str
    comparison: PairedComparison
    policy: GatePolicy = field(default_factory=GatePolicy)
    metric: MetricComparison | None = None
    """The equal_score gate's second look: the policy's metric on the same seeds."""


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
    """The ``level`` quantile of the bootstrapped mean progression difference, in points."""
    n: int

    @property
    def relative_change(self) -> float | None:
        """The candidate's change against the champion, in percent of the champion (None from 0)."""
        return 100.0 * (self.candidate_mean - self.champion_mean) / self.champion_mean if self.champion_mean else None


def compare_metric(candidate: dict[int, float], champion: dict[int, float], candidate_metric: dict[int, float],
                   champion_metric: dict[int, float], policy: GatePolicy, n_resamples: int = 10_000,
                   rng_seed: int = 0) -> MetricComparison:
    """``policy.metric`` per seed (``*_metric``) beside the per-seed progressions, as ``MetricComparison``."""
    seeds = _paired_seeds(candidate, champion)
    if set(candidate_metric) != set(seeds) or set(champion_metric) != set(seeds):
        raise ValueError(f"{policy.metric} was not measured on the progression's seeds {seeds} (candidate: "
                         f"{sorted(candidate_metric)}, champion: {sorted(champion_metric)}): rerun the evaluation")
    progression = np.array([candidate[s] - champion[s] for s in seeds])
    reduction = np.array([champion_metric[s] - candidate_metric[s] for s in seeds])
    means = _bootstrap_means(progression, n_resamples, rng_seed)
    return MetricComparison(
        metric=policy.metric, candidate_mean=float(np.mean([candidate_metric[s] for s in seeds])),
        champion_mean=float(np.mean([champion_metric[s] for s in seeds])), reduction=float(reduction.mean()),
        p_value=permutation_p_value(reduction, rng_seed),
        progression_lower_bound=float(np.quantile(means, policy.level)), n=len(seeds))


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


def decide(comparison: PairedComparison, policy: GatePolicy | None = None,
           metric: MetricComparison | None = None) -> GateVerdict:
    """Keep or roll back under ``policy`` (default: AutoMem's strictly-higher-mean rule); under the first
    two rules a tie or a loss always rolls back, and ``significant`` also rolls back a win that chance
    explains. ``equal_score`` needs ``metric`` (``compare_metric``) and is ``_decide_equal_score``'s."""
    policy = policy or GatePolicy()
    c = comparison
    gap = c.candidate_mean - c.champion_mean
    evidence = (f"difference {c.mean_difference:+.2f} points, SE {c.stderr_difference:.2f}, "
                f"bootstrap CI [{c.ci_low:+.2f}, {c.ci_high:+.2f}], permutation p {c.p_value:.3f}, "
                f"{c.n} paired seeds; gate {policy.rule}")
    if policy.rule == "equal_score":
        return _decide_equal_score(c, policy, metric, evidence)
    if gap > TIE_TOLERANCE:
        if policy.rule == "significant" and c.n < policy.min_seeds:
            reason = (f"rolled back: candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}% on only "
                      f"{c.n} seeds, and the significant gate needs at least {policy.min_seeds} ({evidence})")
            return GateVerdict(keep=False, reason=reason, comparison=c, policy=policy)
        if policy.rule == "significant" and c.p_value > policy.level:
            reason = (f"rolled back: candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}%, but "
                      f"chance explains it (p {c.p_value:.3f} > {policy.level:g}) ({evidence})")
            return GateVerdict(keep=False, reason=reason, comparison=c, policy=policy)
        reason = f"kept: candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}% ({evidence})"
        return GateVerdict(keep=True, reason=reason, comparison=c, policy=policy)
    if gap >= -TIE_TOLERANCE:
        reason = (f"rolled back: tie, candidate and champion both average {c.champion_mean:.2f}% "
                  f"and the gate keeps only a strictly higher score ({evidence})")
        return GateVerdict(keep=False, reason=reason, comparison=c, policy=policy)
    reason = f"rolled back: candidate {c.candidate_mean:.2f}% is below champion {c.champion_mean:.2f}% ({evidence})"
    return GateVerdict(keep=False, reason=reason, comparison=c, policy=policy)


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
    low, high = _bootstrap_interval(d, n_resamples, confidence, rng_seed, scale=1.0)
    p = min(1.0, 2.0 * min(permutation_p_value(d, rng_seed), permutation_p_value(-d, rng_seed)))
    return PairedChange(float(np.mean([before[s] for s in seeds])), float(np.mean([after[s] for s in seeds])),
                        float(d.mean()), low, high, p, len(seeds))


def _decide_equal_score(c: PairedComparison, policy: GatePolicy, metric: MetricComparison | None,
                        evidence: str) -> GateVerdict:
    """Keep a significant gain, or a candidate not worse in progression and lower in ``policy.metric``
    beyond chance; roll back everything else, saying which test failed."""
    if metric is None or metric.metric != policy.metric:
        raise ValueError(f"the equal_score gate needs the per-seed {policy.metric} of both sides (compare_metric)")
    m = metric
    said = (f"{m.metric} {m.candidate_mean:.4g} vs {m.champion_mean:.4g}, permutation p {m.p_value:.3f}; "
            f"progression lower bound {m.progression_lower_bound:+.2f} points, margin {policy.margin:g}")
    evidence = f"{evidence}; {said}"

    def rolled_back(why: str) -> GateVerdict:
        return GateVerdict(keep=False, reason=f"rolled back: {why} ({evidence})", comparison=c, policy=policy, metric=m)

    if c.n < policy.min_seeds:
        return rolled_back(f"only {c.n} seeds, and the equal_score gate needs at least {policy.min_seeds}")
    if c.mean_difference > TIE_TOLERANCE and c.p_value <= policy.level:
        return GateVerdict(keep=True, comparison=c, policy=policy, metric=m, reason=(
            f"kept: candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}% beyond chance ({evidence})"))
    if m.progression_lower_bound < -policy.margin:
        return rolled_back(f"progression may be worse: candidate {c.candidate_mean:.2f}% vs champion "
                           f"{c.champion_mean:.2f}%, lower bound {m.progression_lower_bound:+.2f} below -{policy.margin:g}")
    if m.reduction <= 0 or m.p_value > policy.level:
        return rolled_back(f"progression not worse, but {m.metric} is not lower beyond chance "
                           f"(p {m.p_value:.3f} > {policy.level:g} or no reduction)")
    return GateVerdict(keep=True, comparison=c, policy=policy, metric=m, reason=(
        f"kept: progression not worse ({c.candidate_mean:.2f}% vs {c.champion_mean:.2f}%) and {m.metric} lower "
        f"beyond chance ({evidence})"))


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


def _bootstrap_means(differences: np.ndarray, n_resamples: int, rng_seed: int, scale: float = 100.0) -> np.ndarray:
    """Means of ``n_resamples`` resamples of the seeds (with replacement), times ``scale`` (percent)."""
    rng = np.random.default_rng(rng_seed)
    picks = rng.integers(0, len(differences), size=(n_resamples, len(differences)))
    return scale * differences[picks].mean(axis=1)


def _bootstrap_interval(differences: np.ndarray, n_resamples: int, confidence: float, rng_seed: int,
                        scale: float = 100.0) -> tuple[float, float]:
    """Percentile bootstrap of the mean difference, times ``scale`` (percent): resample seeds, take quantiles."""
    means = _bootstrap_means(differences, n_resamples, rng_seed, scale)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)
