"""Record every evaluation of a scaffold version as one MLflow run.

Built on ``MlflowClient`` rather than mlflow's fluent API: the fluent API keeps the tracking
URI and the active run in process-wide state, so two trackers (a test store and the project
store, or two Dagster resources) would leak into each other. Here each ``Tracker`` owns its
client and every call names its run.

One experiment per game family (``automem-crafter``...) so MLflow's compare view lines up
the versions of one family's scaffold lineage; params, metrics and tags (``run_fields.py``) use the same keys
in every run for the same reason.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

from mlflow.entities import Experiment, LifecycleStage, LoggedModel, Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from sqlalchemy.exc import SQLAlchemyError

from automem_dagster.meta.diagnosis_record import DIAGNOSIS_MD_FILE
from automem_dagster.meta.revise import DIFF_FILE
from automem_dagster.tracking.run_fields import (
    evaluation_metrics,
    evaluation_params,
    evaluation_tags,
    training_metrics,
    training_params,
    training_tags,
    version_tags,
)
from automem_dagster.tracking.runs import (
    COST_PER_STEP,
    DEFAULT_ARTIFACT_ROOT,
    DEFAULT_UI_URL,
    EvaluationRun,
    TrackedRun,
    TrackingError,
    TrainingRun,
    default_tracking_uri,
    specialist_model_name,
)


class Tracker:
    """Logs evaluations to one tracking store.

    ``artifact_root`` is where new experiments keep their artifacts. It defaults to
    ``<project>/mlflow/artifacts`` for a sqlite store (otherwise mlflow would write ``./mlruns``
    under whatever directory the process happens to run in) and to the server's own choice
    for a tracking server. The store is opened on first use, not when the tracker is made.
    """

    def __init__(self, tracking_uri: str | None = None, ui_url: str | None = None, artifact_root: Path | None = None):
        self.tracking_uri = tracking_uri or default_tracking_uri()
        self.ui_url = (ui_url or os.environ.get("AUTOMEM_MLFLOW_UI") or DEFAULT_UI_URL).rstrip("/")
        if artifact_root is None and self.tracking_uri.startswith("sqlite:"):
            artifact_root = DEFAULT_ARTIFACT_ROOT
        self.artifact_root = Path(artifact_root).resolve() if artifact_root is not None else None

    @cached_property
    def client(self) -> MlflowClient:
        """Made on first use: for a sqlite store, MlflowClient opens (and may create and migrate) the
        database. mlflow announces that at INFO on the console of every command that makes a new
        store ("Creating initial MLflow database tables...", "Updating database tables"): its
        warnings and errors still show, its housekeeping does not."""
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
        with self._store("opening the store"):
            return MlflowClient(tracking_uri=self.tracking_uri)

    @contextmanager
    def _store(self, doing: str) -> Iterator[None]:
        """Turn a store failure into a TrackingError that says which store and what to do."""
        try:
            yield
        except (MlflowException, SQLAlchemyError) as exc:
            if self.tracking_uri.startswith(("http:", "https:")):
                fix = ("start the server (`mlflow server --backend-store-uri sqlite:///<path>/mlflow.db --workers 1 "
                       "--host ... --port ...`) or unset MLFLOW_TRACKING_URI to use the project's sqlite store")
            else:
                fix = "check that the path is a writable MLflow sqlite database, or point MLFLOW_TRACKING_URI at another store"
            raise TrackingError(f"MLflow tracking store {self.tracking_uri} failed while {doing}: {exc}. To fix: {fix}") from exc

    def experiment_id(self, family: str) -> str:
        """The id of ``automem-<family>``, created on first use."""
        name = f"automem-{family}"
        with self._store(f"looking up experiment {name}"):
            experiment = self.client.get_experiment_by_name(name)
            if experiment is None:
                experiment = self._create_experiment(name, family)
        if experiment.lifecycle_stage == LifecycleStage.DELETED:
            raise TrackingError(
                f"experiment {name} ({experiment.experiment_id}) in {self.tracking_uri} is deleted: restore it with "
                f"`mlflow experiments restore --experiment-id {experiment.experiment_id}` or purge it with `mlflow gc`"
            )
        return experiment.experiment_id

    def _create_experiment(self, name: str, family: str) -> Experiment:
        location = (self.artifact_root / name).as_uri() if self.artifact_root is not None else None
        tags = {
            "automem.family": family,
            "mlflow.note.content": (
                f"AutoMem evaluations of **{family}** memory scaffolds: one run per evaluated scaffold version "
                "(candidate, champion or plain evaluation) or baseline agent on fixed seeds. Compare runs by "
                "`automem.version` and `automem.agent`."
            ),
        }
        try:
            self.client.create_experiment(name, artifact_location=location, tags=tags)
        except MlflowException as exc:
            # Parallel rollout processes may create the same experiment at once; the loser reuses it.
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        return self.client.get_experiment_by_name(name)

    def log_evaluation(self, run: EvaluationRun) -> TrackedRun:
        """One MLflow run with the evaluation's params, metrics, tags and artifacts; FAILED if logging breaks."""

        def log(run_id: str) -> None:
            self.client.log_batch(run_id, metrics=evaluation_metrics(run), params=evaluation_params(run),
                                  tags=evaluation_tags(run))
            self._log_artifacts(run_id, run)

        return self._logged_run(run.family, run.run_name, log, run.span_ms)

    def log_table(self, family: str, name: str, params: dict, metrics: dict[str, float],
                  artifacts: list[Path]) -> TrackedRun:
        """A table comparing versions (``loop.paper_table``) as one run of ``automem-<family>-tables``: a
        separate experiment, since its runs are no evaluation of one version (``runs_for`` reads those)."""

        def log(run_id: str) -> None:
            now = int(time.time() * 1000)
            self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                                  params=[Param(k, str(v)) for k, v in params.items()],
                                  tags=[RunTag("automem.family", family)])
            for path in artifacts:
                self.client.log_artifact(run_id, str(path))

        return self._logged_run(f"{family}-tables", name, log)

    def _logged_run(self, family: str, name: str, log: Callable[[str], None],
                    span_ms: tuple[int, int] | None = None) -> TrackedRun:
        """Create run ``name`` in ``automem-<family>``, call ``log(run_id)``, and end the run FINISHED,
        or FAILED (and re-raise) when logging breaks, so no run is left RUNNING."""
        experiment_id = self.experiment_id(family)
        with self._store(f"creating run {name} in experiment automem-{family}"):
            run_id = self.client.create_run(experiment_id, run_name=name,
                                            start_time=span_ms[0] if span_ms else None).info.run_id
        with self._store(f"logging run {name} ({run_id})"):
            try:
                log(run_id)
            except BaseException:
                self.client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
                raise
            self.client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED),
                                       end_time=span_ms[1] if span_ms else None)
        return TrackedRun(run_id, experiment_id, f"{self.ui_url}/#/experiments/{experiment_id}/runs/{run_id}")

    def _log_artifacts(self, run_id: str, run: EvaluationRun) -> None:
        self.client.log_text(run_id, run.scaffold_yaml, f"scaffold/v{run.version}.yaml")
        if run.diagnosis_md is not None:
            self.client.log_text(run_id, run.diagnosis_md, DIAGNOSIS_MD_FILE)
        if run.diff_md is not None:
            self.client.log_text(run_id, run.diff_md, DIFF_FILE)
        if run.verdict is not None:
            self.client.log_text(run_id, json.dumps(run.verdict, indent=2, sort_keys=True), "decision.json")
        for plot in run.plots:
            self.client.log_artifact(run_id, str(plot), "plots")
        for extra in run.extra_artifacts:
            self.client.log_artifact(run_id, str(extra))

    def log_training(self, run: TrainingRun) -> TrackedRun:
        """One MLflow run for a LoRA training: settings as params, the loss curves as stepped
        metrics, its curation records as artifacts, the adapter as the run's MLflow model (pyfunc,
        ``tracking/specialist_model.py``), and a new version of the registered model
        ``automem-<family>-specialist`` whose source is that model."""
        from automem_dagster.tracking.specialist_model import log_specialist_model  # mlflow.pyfunc: only here

        def log(run_id: str) -> None:
            self.client.log_batch(run_id, metrics=training_metrics(run), params=training_params(run),
                                  tags=training_tags(run))
            for path in run.artifacts:
                self.client.log_artifact(run_id, str(path))
            model = log_specialist_model(self.client, self.experiment_id(run.family), run_id, run.adapter,
                                         run.adapter_dir, run.base, version_tags(run))
            self._register(run, run_id, model)

        return self._logged_run(run.family, f"v{run.scaffold_version}+{run.adapter}-training", log)

    def _register(self, run: TrainingRun, run_id: str, model: LoggedModel) -> None:
        """A new version of the family's specialist model from the logged ``model`` (source
        ``models:/<id>``, as ``mlflow.register_model`` makes it). mlflow's sqlite registry looks that
        source up through the process-wide tracking URI rather than this client's (mlflow 3.17), so
        the URI is this tracker's for that one call."""
        from mlflow.tracking._tracking_service.utils import _use_tracking_uri

        name = specialist_model_name(run.family)
        try:
            self.client.create_registered_model(name, description=(
                f"LoRA memory specialists for {run.family}: one version per trained adapter; the adapter is "
                "served next to the frozen game model (vLLM --lora-modules, or as GGUF by the embedded server)."))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        with _use_tracking_uri(self.tracking_uri):
            self.client.create_model_version(name, f"models:/{model.model_id}", run_id=run_id,
                                             tags=version_tags(run), model_id=model.model_id)

    def runs_for(self, family: str) -> list[dict]:
        """The family's runs, newest first: version, role, agent, adapter, meta, run_id, progression, verdict
        (the ``automem.decision`` tag), champion_run (the run of the champion batch a challenger was played
        beside), and the seeds and step budget (only runs on the same seeds and steps are comparable)."""
        name = f"automem-{family}"
        rows: list[dict] = []
        with self._store(f"listing the runs of experiment {name}"):
            experiment = self.client.get_experiment_by_name(name)
            if experiment is None:
                return rows
            token = None
            while True:
                page = self.client.search_runs(
                    [experiment.experiment_id], order_by=["attributes.start_time DESC"], page_token=token
                )
                for found in page:
                    tags, metrics = found.data.tags, found.data.metrics
                    rows.append({
                        "version": int(tags["automem.version"]),
                        "role": tags["automem.role"],
                        "agent": tags.get("automem.agent", "memory"),
                        "adapter": tags.get("automem.adapter"),
                        "meta": tags.get("automem.meta"),
                        "run_id": found.info.run_id,
                        "progression_mean": metrics.get("progression_mean"),
                        "progression_se": metrics.get("progression_se"),
                        "decision": tags.get("automem.decision"),
                        "champion_run": tags.get("automem.champion_run"),
                        "seeds": found.data.params.get("seeds"),
                        "max_steps": int(found.data.params["max_steps"]) if "max_steps" in found.data.params else None,
                        "game": tags.get("automem.game"),
                        "identity": tags.get("automem.identity"),
                        "models": tags.get("automem.models"),
                        "settings": json.loads(found.data.params.get("agent_settings") or "{}"),
                        **{key: metrics.get(key) for key in COST_PER_STEP},
                    })
                token = page.token
                if not token:
                    return rows
