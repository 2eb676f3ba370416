"""MLflow tracking of scaffold evaluations: one experiment per game family, one run per evaluation.

``Tracker`` is imported on first use (``tracking.Tracker``): it needs MLflow, which a rollout-only
install does not have; the run records and the store's location need nothing."""

from automem_dagster.tracking.runs import (
    EvaluationRun,
    TrackedRun,
    TrackingError,
    TrainingRun,
    default_tracking_uri,
)

__all__ = ["EvaluationRun", "TrackedRun", "Tracker", "TrackingError", "TrainingRun", "default_tracking_uri"]


def __getattr__(name: str):
    if name == "Tracker":
        try:
            from automem_dagster.tracking.mlflow_tracking import Tracker
        except ImportError as exc:
            raise TrackingError(f"tracking needs MLflow, which is not installed ({exc}): install the `dagster` extra "
                                "(pip install 'automem-dagster[dagster]'), or run the command with --no-tracking") from exc
        return Tracker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
