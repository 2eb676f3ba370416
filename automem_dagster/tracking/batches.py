"""One MLflow run per evaluation batch.

The champion's evaluation batch is reused by every round on the same seeds and step budget
(``loop.structure.evaluate_stage``), so logging it with each round made a run per round with
identical figures. A batch is now logged once, tagged ``automem.batch``; a later round finds
that run and links it from its challenger's run (tag ``automem.champion_run``) instead.
"""

from __future__ import annotations

from automem_dagster.tracking.mlflow_tracking import Tracker
from automem_dagster.tracking.runs import EvaluationRun, TrackedRun


def logged_batch_run(tracker: Tracker, family: str, batch: str) -> TrackedRun | None:
    """The first run of ``automem-<family>`` that logged ``batch``; None when none did."""
    experiment = tracker.client.get_experiment_by_name(f"automem-{family}")
    if experiment is None or "'" in batch:      # a quote cannot be matched in an MLflow filter string
        return None
    found = tracker.client.search_runs([experiment.experiment_id], filter_string=f"tags.`automem.batch` = '{batch}'",
                                       max_results=1, order_by=["attributes.start_time ASC"])
    if not found:
        return None
    run_id = found[0].info.run_id
    return TrackedRun(run_id, experiment.experiment_id,
                      f"{tracker.ui_url}/#/experiments/{experiment.experiment_id}/runs/{run_id}")


def log_champion_once(tracker: Tracker, champion: EvaluationRun, challenger: TrackedRun) -> TrackedRun:
    """The champion's run of this round: the one that already logged its batch, else a new one;
    the ``challenger``'s run names it in the tag ``automem.champion_run``."""
    run = (champion.batch and logged_batch_run(tracker, champion.family, champion.batch)) or tracker.log_evaluation(champion)
    tracker.client.set_tag(challenger.run_id, "automem.champion_run", run.run_id)
    return run
