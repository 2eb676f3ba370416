"""Progression (BALROG-faithful aggregation) and behaviour metrics from trajectories."""

from automem_dagster.metrics.behaviour import BehaviourMetrics, behaviour_metrics
from automem_dagster.metrics.progression import ProgressionSummary, overall_progression, summarize_progression

__all__ = ["BehaviourMetrics", "ProgressionSummary", "behaviour_metrics", "overall_progression", "summarize_progression"]
