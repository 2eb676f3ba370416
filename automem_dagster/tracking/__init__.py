"""MLflow tracking of scaffold evaluations: one experiment per game family, one run per evaluation."""

from automem_dagster.tracking.mlflow_tracking import (
    EvaluationRun,
    TrackedRun,
    Tracker,
    TrackingError,
    TrainingRun,
    default_tracking_uri,
    specialist_model_name,
)

__all__ = ["EvaluationRun", "TrackedRun", "Tracker", "TrackingError", "TrainingRun", "default_tracking_uri",
           "specialist_model_name"]
