"""The gate: a paired comparison (``metrics/paired.py``) judged under a ``GatePolicy``, a round's verdict.

Every gate answers one of three outcomes (``OUTCOMES``): kept, rolled back, or inconclusive (the
evidence cannot tell the candidate from the champion at this budget; the champion stays, and the
verdict says how many paired seeds would detect the smallest gain worth having, ``min_gain``). Each
reads the noise floor (``metrics.noise``: how far two replays of the same champion differ), and a
gain inside it is never kept. Three gate policies (``GatePolicy``), chosen per round and recorded:

- ``significant`` (the default): kept when the paired difference is above the floor and positive
  beyond chance (a one-sided paired permutation test, sign flips of the per-seed differences, with
  p <= ``level``) on at least ``min_seeds`` seeds; rolled back when the bootstrap interval rules out
  a gain of ``min_gain`` points or the candidate is worse beyond chance; inconclusive otherwise, and
  always on fewer seeds than it decides on.
- ``higher_mean`` (AutoMem's published rule): kept when the mean is higher by more than the noise
  floor, rolled back when lower by more, inconclusive inside it. On few seeds it keeps noise (a
  one-sided test at level 0.5); it stays for reproducing the paper.
- ``equal_score`` (opt-in): what ``significant`` keeps, or a candidate whose progression is not
  worse (the bootstrap lower bound of the paired difference above ``-margin``, a share of the
  champion's score and never less than the floor) while a named cost or behaviour metric
  (``GATE_METRICS``, lower is better) is lower beyond chance; each route tests at ``level / 2``.
  Inconclusive when the champion's own score is inside the floor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from automem_dagster.metrics.paired import GUARD_COLLAPSE, GatePolicy, MetricComparison
from automem_dagster.metrics.resampling import TIE_TOLERANCE
from automem_dagster.paired_comparison import PairedComparison

if TYPE_CHECKING:
    from automem_dagster.metrics.power import Detectable


@dataclass(frozen=True)
class Verdict:
    """What the gate answers (``OUTCOMES``), and a reason that quotes the numbers."""

    outcome: Literal["kept", "rolled_back", "inconclusive"]
    reason: str
    comparison: PairedComparison
    policy: GatePolicy = field(default_factory=GatePolicy)
    metric: MetricComparison | None = None
    """The equal_score gate's second look: the policy's metric on the same seeds."""

    @property
    def keep(self) -> bool:
        """Whether the candidate replaces the champion: only on ``kept`` (inconclusive keeps the champion)."""
        return self.outcome == "kept"



def gate_verdict(comparison: PairedComparison, policy: GatePolicy | None = None,
                 metric: MetricComparison | None = None, floor: float | None = None,
                 detectable: Detectable | None = None, metric_floor: float | None = None,
                 floor_basis: str | None = None) -> Verdict:
    """Keep, roll back or call inconclusive under ``policy`` (default: ``significant``), with ``floor`` the
    measured noise floor in points (``metrics.noise``; None: not measured yet, read as 0) and ``detectable``
    the power figures of these seeds (``metrics.power.detectable_gain``), quoted by an inconclusive verdict
    as the seeds a decision would need. A gain inside the floor is never kept. ``equal_score`` needs
    ``metric`` (``compare_metric``), reads ``metric_floor`` (the metric's A/A floor, in its unit) the same
    way, and is ``_equal_score_verdict``'s. ``floor_basis`` says what the floor rests on (A/A pairs, seeds,
    bit-identical or not); the reason quotes it. ``higher_mean`` on a floor of 0 (bit-identical replays) or
    none measured still needs a gain beyond what the seeds' spread can tell from none: the bootstrap
    interval over seeds above 0 (below 0 for a roll-back), so one achievement on one seed of six is not a keep."""
    policy = policy or GatePolicy()
    c = comparison
    noise = floor or 0.0
    said_floor = (f"noise floor {floor:.2f} points" if floor is not None else "noise floor not measured") \
        + (f" ({floor_basis})" if floor_basis else "")
    evidence = (f"difference {c.mean_difference:+.2f} points, SE {c.stderr_difference:.2f}, "
                f"bootstrap CI [{c.ci_low:+.2f}, {c.ci_high:+.2f}], permutation p {c.p_value:.3f}, "
                f"{c.n} paired seeds, {said_floor}; gate {policy.rule}")
    judge = _Judge(c, policy, evidence, detectable)
    if policy.rule == "equal_score":
        return _equal_score_verdict(judge, metric, noise, metric_floor)
    gap = c.mean_difference
    scores = f"candidate {c.candidate_mean:.2f}% vs champion {c.champion_mean:.2f}%"
    if policy.rule == "higher_mean":
        spread_only = noise == 0.0  # no floor beyond 0: only the seeds' spread can bound the noise
        seeds_say = " and beyond the seeds' spread (bootstrap interval clear of 0)" if spread_only else ""
        if gap > noise + TIE_TOLERANCE and (not spread_only or c.ci_low > TIE_TOLERANCE):
            return judge.kept(f"candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}% by more "
                              f"than the noise floor{seeds_say}")
        if gap < -noise - TIE_TOLERANCE and (not spread_only or c.ci_high < -TIE_TOLERANCE):
            return judge.rolled_back(f"candidate {c.candidate_mean:.2f}% is below champion {c.champion_mean:.2f}% "
                                     f"by more than the noise floor{seeds_say}")
        if spread_only and abs(gap) > TIE_TOLERANCE:
            return judge.inconclusive(f"{scores}: with no noise floor above 0, the seeds' spread must tell the "
                                      f"difference from none, and its bootstrap interval [{c.ci_low:+.2f}, "
                                      f"{c.ci_high:+.2f}] includes 0")
        return judge.inconclusive(f"{scores}, a difference inside the noise floor")
    if c.n < policy.decides_on:
        return judge.inconclusive(f"{scores} on {c.n} seeds, and the significant gate decides on no fewer than "
                                  f"{policy.decides_on}")
    if gap > noise + TIE_TOLERANCE and c.p_value <= policy.level:
        return judge.kept(f"candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}% beyond chance "
                          f"(p {c.p_value:.3f} <= {policy.level:g}) and beyond the noise floor")
    ruled_out = judge.rules_out_gain()
    if ruled_out:
        return judge.rolled_back(f"{scores}: {ruled_out}")
    return judge.inconclusive(f"{scores}: neither a gain beyond chance and the noise floor nor a gain of "
                              f"{policy.min_gain:g} points ruled out")


@dataclass(frozen=True)
class _Judge:
    """The three verdicts of one decision, each quoting the same evidence, and the tests the rules share."""

    c: PairedComparison
    policy: GatePolicy
    evidence: str
    detectable: Detectable | None
    metric: MetricComparison | None = None

    def rules_out_gain(self) -> str:
        """Why the evidence rules out a gain worth having (``policy.min_gain``), or "" when it does not: the
        bootstrap interval's upper end below it, or the candidate worse beyond chance."""
        c, policy = self.c, self.policy
        if c.ci_high < policy.min_gain:
            return (f"a gain of {policy.min_gain:g} points is ruled out (the interval ends at {c.ci_high:+.2f})")
        if c.mean_difference < 0 and c.p_worse <= policy.level:
            return "the candidate is worse beyond chance"
        return ""

    def kept(self, why: str) -> Verdict:
        return self._verdict("kept", why)

    def rolled_back(self, why: str) -> Verdict:
        return self._verdict("rolled_back", why)

    def inconclusive(self, why: str) -> Verdict:
        """The champion stays; says how many paired seeds would detect ``policy.min_gain`` at this spread."""
        d, gain = self.detectable, f"{self.policy.min_gain:g}"
        if d is not None and d.seeds_for.get(gain) is not None:
            need = f"{d.seeds_for[gain]} paired seeds would detect a {gain}-point gain at {d.power:.0%} power"
        elif d is not None:
            need = f"no spread measured, so the seeds a {gain}-point gain needs are unknown: play longer episodes"
        else:
            need = f"the seeds a {gain}-point gain needs were not computed"
        return self._verdict("inconclusive", f"{why}; the champion stays, {need}")

    def _verdict(self, outcome: str, why: str) -> Verdict:
        return Verdict(outcome=outcome, reason=f"{outcome.replace('_', ' ')}: {why} ({self.evidence})",
                           comparison=self.c, policy=self.policy, metric=self.metric)


def _equal_score_verdict(judge: _Judge, metric: MetricComparison | None, noise: float,
                        metric_floor: float | None) -> Verdict:
    """Keep a gain beyond chance and the floor, or a candidate not worse in progression (lower bound above
    ``-margin``, the margin ``policy.margin`` of the champion's score and at least the floor) and lower in
    ``policy.metric`` beyond chance and beyond its own floor; each route tests at half the level, so the
    gate's false-keep rate stays within ``level``. Non-inferiority is inconclusive when the champion's score
    is inside a floor above 0."""
    c, policy = judge.c, judge.policy
    if metric is None or metric.metric != policy.metric:
        raise ValueError(f"the equal_score gate needs the per-seed {policy.metric} of both sides (compare_metric)")
    m = metric
    margin = max(policy.margin * c.champion_mean, noise)
    unit = " (uncached: prompt-cache hits the server reported not counted)" if m.metric == "input_tokens_per_step" else ""
    said = (f"{m.metric}{unit} {m.candidate_mean:.4g} vs {m.champion_mean:.4g} on {m.n} seeds, permutation p "
            f"{m.p_value:.3f}; progression lower bound {m.progression_lower_bound:+.2f} points, margin "
            f"{margin:.2f} points ({policy.margin:.0%} of the champion's score, at least the floor); "
            + (f"seeds {list(m.excluded)} excluded ({m.metric} has no denominator there); " if m.excluded else "")
            + (f"{m.metric} noise floor {metric_floor:.4g}" if metric_floor is not None
               else f"{m.metric} noise floor not measured") + f"; each route at level {policy.level / 2:g}")
    judge = _Judge(c, policy, f"{judge.evidence}; {said}", judge.detectable, m)
    scores = f"candidate {c.candidate_mean:.2f}% vs champion {c.champion_mean:.2f}%"
    if c.n < policy.decides_on:
        return judge.inconclusive(f"{scores} on {c.n} seeds, and the equal_score gate decides on no fewer than "
                                  f"{policy.decides_on}")
    half = policy.level / 2
    if c.mean_difference > noise + TIE_TOLERANCE and c.p_value <= half:
        return judge.kept(f"candidate {c.candidate_mean:.2f}% beats champion {c.champion_mean:.2f}% beyond chance "
                          "and the noise floor")
    if m.progression_lower_bound < -margin:
        return judge.rolled_back(f"progression may be worse: {scores}, lower bound "
                                 f"{m.progression_lower_bound:+.2f} below -{margin:.2f}")
    if noise > 0 and c.champion_mean <= noise:  # a floor of 0 (exact replays) makes a tie at 0 a real tie
        return judge.inconclusive(f"{scores}: the champion's score is inside the noise floor, so 'not worse' "
                                  "cannot be told from noise")
    cheaper = m.reduction > (metric_floor or 0.0) and m.p_value <= half
    if cheaper and m.collapsed():
        return judge.rolled_back(f"{m.metric} lower beyond chance, but bought by a collapse of "
                                 f"{', '.join(m.collapsed())} (below {GUARD_COLLAPSE:.0%} of the champion's)")
    if cheaper:
        return judge.kept(f"progression not worse ({scores}) and {m.metric} lower beyond chance")
    if c.ci_high < policy.min_gain:
        return judge.rolled_back(f"progression not worse, but {m.metric} is not lower beyond chance "
                                 f"(p {m.p_value:.3f} > {half:g}, or no reduction beyond its floor) and a gain of "
                                 f"{policy.min_gain:g} points is ruled out")
    return judge.inconclusive(f"{scores}: neither a gain nor a lower {m.metric} beyond chance, and a gain of "
                              f"{policy.min_gain:g} points not ruled out")
