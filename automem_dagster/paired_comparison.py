"""The paired comparison of a candidate with the champion on the same seeds, as a record.

``metrics.paired`` computes it and ``metrics.verdict`` judges it; the scaffold lineage persists it with each
decided version. It lives below both so that the lineage need not import the metrics package
(which imports the agent, which imports the scaffold package).
"""

from __future__ import annotations

from dataclasses import dataclass


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
    p_worse: float = 1.0
    """The same test the other way: the p-value of a loss this large or larger by chance."""
