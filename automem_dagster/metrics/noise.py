"""The noise floor: how far two plays of the same champion on the same seeds differ (an A/A evaluation).

The same scaffold, played twice by the same models on the same seeds, need not score the same: a server
that ignores sampling seeds, batching order or float non-determinism moves an episode, and one extra
Crafter achievement on one seed of six moves the mean by 0.76 points. A gate that reads such a move as a
gain keeps noise. So a gate quotes the floor an A/A pair measured, and never keeps a gain inside it.

The floor is the largest mean difference the A/A pair's bootstrap interval allows, in points:
max(|ci_low|, |ci_high|) of the paired comparison of the replay against the first play. It brackets the
observed A/A difference itself (an interval contains its mean), so the A/A pair is never kept against its
own floor, and it is 0 when the replay repeats every seed's score. The equal_score gate's metric gets a
floor of its own the same way, in the metric's unit, from the same two plays.
"""

from __future__ import annotations

from dataclasses import dataclass

from automem_dagster.metrics.paired import compare_paired
from automem_dagster.metrics.resampling import paired_change
from automem_dagster.paired_comparison import PairedComparison


@dataclass(frozen=True)
class NoiseFloor:
    """The A/A comparison (replay against first play) and the floor it sets, in progression points."""

    points: float
    comparison: PairedComparison
    metric: float | None = None
    """The floor of the equal_score gate's metric, in its unit; None when the metric was not given."""

    def describe(self) -> str:
        c = self.comparison
        return (f"noise floor {self.points:.2f} points: the champion replayed scored {c.candidate_mean:.2f}% against "
                f"{c.champion_mean:.2f}% on the same {c.n} seeds (difference {c.mean_difference:+.2f}, bootstrap CI "
                f"[{c.ci_low:+.2f}, {c.ci_high:+.2f}])")


def noise_floor(first: dict[int, float], replay: dict[int, float], first_metric: dict[int, float] | None = None,
                replay_metric: dict[int, float] | None = None) -> NoiseFloor:
    """The floor of an A/A pair: per-seed progressions (in [0, 1]) of two plays of the same agent, and
    with ``*_metric`` (per seed, the equal_score gate's metric of the same plays) the metric's floor."""
    c = compare_paired(replay, first)
    metric = None
    if first_metric is not None and replay_metric is not None:
        m = paired_change(replay_metric, first_metric)
        metric = max(abs(m.ci_low), abs(m.ci_high))
    return NoiseFloor(max(abs(c.ci_low), abs(c.ci_high)), c, metric)
