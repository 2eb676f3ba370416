"""Retries of a batch's model calls, apart from the model's latency, from trajectories alone.

A turn records its HTTP attempts, its failed attempts by cause (``http_<status>``,
``timeout``, ``connection``) and the time they cost before the answer came (``retry_s``),
while its ``latency_s`` is the answering attempt alone. Pooled over a batch, these show a
faulty or rate-limiting endpoint for what it is: the same calls per step, more attempts, and
time lost to retries, where a latency that included them made the model look slow instead.
Turns written before retries were recorded count as one attempt with no retry.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from automem_dagster.llm.attempts import describe_failures


@dataclass(frozen=True)
class RetryStats:
    calls: int
    attempts: int
    retries: int
    retry_s: float
    """Time lost to retries: failed attempts and the backoff after each."""
    model_s: float
    """Time the answering attempts took (the model's latency), for comparison."""
    by_cause: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    def as_metrics(self) -> dict[str, float]:
        """Flat numbers for MLflow: ``attempts``, ``retries``, ``retries_<cause>``, ``retry_s``, ``model_s``."""
        flat = {"attempts": self.attempts, "retries": self.retries, "retry_s": self.retry_s, "model_s": self.model_s}
        return flat | {f"retries_{cause}": n for cause, n in sorted(self.by_cause.items())}

    def describe(self) -> str:
        """One line: ``120 calls, 131 attempts: 11 retries (8 × HTTP 500, 3 × timeout), 4.2 s lost ...``."""
        line = f"{self.calls} calls, {self.attempts} attempts: "
        if not self.retries:
            return line + f"no retries; model latency {self.model_s:.1f} s"
        return (line + f"{self.retries} retries ({describe_failures(self.by_cause)}), {self.retry_s:.1f} s lost to "
                f"retries beside {self.model_s:.1f} s of model latency")


def retry_stats(episodes: list[list[dict]]) -> RetryStats:
    """``episodes`` are lists of step records (as in trajectory files), pooled over episodes."""
    calls = attempts = 0
    retry_s = model_s = 0.0
    causes: Counter[str] = Counter()
    for records in episodes:
        for rec in records:
            for turn in rec["turns"]:
                calls += 1
                attempts += turn.get("attempts", 1)
                causes.update(turn.get("retries", {}))
                retry_s += turn.get("retry_s", 0.0)
                model_s += turn["latency_s"]
    return RetryStats(calls=calls, attempts=attempts, retries=sum(causes.values()), retry_s=retry_s, model_s=model_s,
                      by_cause=dict(causes))
