"""What a decision could have seen: the smallest true gain its gate detects with its seeds.

A tie on 2 seeds of 6 steps says little: it cannot tell "no gain" from "a gain too small for this
budget". So every decision record states, for its gate, the smallest true mean gain (in progression
points) that the gate would keep with probability ``POWER`` (80 %), given the number of paired
seeds n and the spread of the per-seed differences, and how many seeds a few given gains would need.

The figure is the normal approximation of a one-sided test on the mean difference,

    smallest gain = (z[1 - level] + z[power]) * sd / sqrt(n),

with ``sd`` the sample standard deviation (n - 1) of the per-seed differences. ``higher_mean`` keeps
any positive observed mean, a one-sided test at level 0.5 (z = 0); ``significant`` and
``equal_score`` test at their ``level`` (equal_score's gain route at half of it). A permutation test on n
seeds cannot reach a p-value below 2**-n, and those gates need ``min_seeds``: below either floor no gain
is detectable, whatever its size.
With one seed, or a spread of 0 (every seed moved by the same amount, often 0 on both sides), the
differences say nothing about the spread; the spread of the two sides' own per-seed scores (as if
unpaired, an overestimate when seeds are correlated) stands in, and when that is 0 too the figure is
left out with a note saying why.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist, stdev

from automem_dagster.metrics.paired import GatePolicy

POWER = 0.8
GAINS = (1.0, 2.0, 5.0, 10.0, 20.0)
"""Gains, in progression points, for which a record says how many seeds the gate would need."""


@dataclass(frozen=True)
class Detectable:
    """The smallest gain a gate could detect on its seeds (``detectable_gain``), as a record keeps it."""

    n: int
    spread: float | None
    """Standard deviation of the per-seed differences in points (or its stand-in, ``spread_from``)."""
    spread_from: str
    level: float
    """The one-sided level the gate tests at: 0.5 for higher_mean (a positive mean), else the policy's."""
    power: float
    smallest_gain: float | None
    """Points of mean progression; None when no gain is detectable on these seeds (``note`` says why)."""
    seeds_for: dict[str, int | None] = field(default_factory=dict)
    """For each of ``GAINS`` and the policy's ``min_gain`` (points, as text): the paired seeds the gate would
    need at this spread."""
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line: the smallest detectable gain with its inputs, or why there is none."""
        inputs = f"{self.n} seeds, spread {self.spread:.2f} points ({self.spread_from})" if self.spread is not None \
            else f"{self.n} seeds, no spread measured"
        needs = ", ".join(f"{gain} points: {n} seeds" for gain, n in self.seeds_for.items() if n is not None)
        if self.smallest_gain is not None:
            head = f"smallest gain detectable at {self.power:.0%} power: {self.smallest_gain:.2f} points"
        else:
            head = "no gain detectable" if self.spread is not None else "smallest detectable gain unknown"
        return f"{head} ({inputs}, one-sided level {self.level:g}){'; ' + self.note if self.note else ''}" \
               f"{'; seeds needed for ' + needs if needs else ''}"


def detectable_gain(candidate: dict[int, float], champion: dict[int, float], policy: GatePolicy,
                    power: float = POWER) -> Detectable:
    """The smallest true gain ``policy`` keeps with probability ``power`` on these paired seeds (per-seed
    progressions in [0, 1]), with the seeds a few given gains need; see the module docstring."""
    seeds = sorted(candidate)
    n = len(seeds)
    level = 0.5 if policy.rule == "higher_mean" else policy.level / (2 if policy.rule == "equal_score" else 1)
    z = NormalDist().inv_cdf(1.0 - level) + NormalDist().inv_cdf(power)
    spread, spread_from = _spread(candidate, champion, seeds)
    floor = policy.decides_on
    notes = []
    if spread is None:
        notes.append(f"every seed scored the same on both sides ({100 * champion[seeds[0]]:.2f}%)"
                     if n > 1 else "one seed shows no spread")
    if n < floor:
        notes.append(f"the {policy.rule} gate keeps nothing on fewer than {floor} seeds")
    smallest = z * spread / math.sqrt(n) if spread is not None and n >= floor else None
    seeds_for = {f"{gain:g}": max(floor, math.ceil((z * spread / gain) ** 2)) if spread is not None else None
                 for gain in sorted({*GAINS, policy.min_gain})}
    return Detectable(n, spread, spread_from, level, power, smallest, seeds_for if spread is not None else {},
                      "; ".join(notes))


def _spread(candidate: dict[int, float], champion: dict[int, float], seeds: list[int]) -> tuple[float | None, str]:
    """The per-seed differences' standard deviation in points, or the unpaired stand-in, or None."""
    if len(seeds) < 2:
        return None, "none"
    paired = stdev(100.0 * (candidate[s] - champion[s]) for s in seeds)
    if paired > 0:
        return paired, "paired differences"
    unpaired = math.hypot(stdev(100.0 * candidate[s] for s in seeds), stdev(100.0 * champion[s] for s in seeds))
    if unpaired > 0:
        return unpaired, "both sides' per-seed scores, unpaired"
    return None, "none"

