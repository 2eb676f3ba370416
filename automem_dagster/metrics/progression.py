"""Progression aggregated the way BALROG reports it: percent, mean over episodes, and the
standard error as the population standard deviation over sqrt(n)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressionSummary:
    mean: float
    stderr: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.1f} ± {self.stderr:.1f} (n={self.n})"


def summarize_progression(values: list[float]) -> ProgressionSummary:
    """``values`` are per-episode progressions in [0, 1]; the result is in percent."""
    if not values:
        raise ValueError("no episodes to summarize: run at least one episode")
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / n
    return ProgressionSummary(100.0 * mean, 100.0 * math.sqrt(var) / math.sqrt(n), n)


def overall_progression(per_environment: dict[str, ProgressionSummary]) -> float:
    """BALROG's overall score: the mean of the environment means."""
    if not per_environment:
        raise ValueError("no environments to average")
    return sum(s.mean for s in per_environment.values()) / len(per_environment)
