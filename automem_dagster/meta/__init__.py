"""The meta-LLM's side of the structure loop: deterministic evidence and a budgeted rendering of a
batch, the two things a diagnosis is built from (the meta-LLM calls themselves come on top)."""

from automem_dagster.meta.compress import RenderedBatch, estimate_tokens, render_for_diagnosis, render_step
from automem_dagster.meta.evidence import (
    FAILURE_KINDS,
    ContextGrowth,
    EpisodeEvidence,
    Evidence,
    FailureKind,
    FailurePoint,
    FileUsage,
    ProgressionGain,
    collect_evidence,
)

__all__ = [
    "FAILURE_KINDS", "ContextGrowth", "EpisodeEvidence", "Evidence", "FailureKind", "FailurePoint", "FileUsage",
    "ProgressionGain", "RenderedBatch", "collect_evidence", "estimate_tokens", "render_for_diagnosis", "render_step",
]
