"""Whole rounds for the CLI (``automem revise``, ``rounds``, ``train``, ``demo``), run as Dagster runs from this process.

A CLI round is the Dagster round: every step of the loop's plan (``loop/round_plan.py``) in one run of
``structure_full_round_job`` or ``proficiency_full_round_job``, executed in process against the
project's instance (the one ``make dagster`` opens), or with ``--executor celery`` on Celery workers
(``defs/celery_rounds.py``). So the UI shows a CLI round as the run it was,
each asset materialized and the gate check evaluated, and nothing sequences a round a second time.
The run is tagged ``automem/driver: cli``: the CLI chains its own rounds, so the chaining sensors
leave its champions to it; the gate sensors skip its evaluations because the run decided them itself.

The CLI imports this module only for a whole round: the core install, without the ``dagster`` extra,
runs the stage commands (``rollout``, ``diagnose``, ``propose``, ``evaluate``, ``decide``, ``curate``,
``finetune``) without it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import dagster as dg
from dagster._core.instance.ref import InstanceRef

from automem_dagster.defs.celery_rounds import run_on_celery
from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.definitions import defs
from automem_dagster.defs.execution.run_tags import CLI_DRIVER, DRIVER_TAG
from automem_dagster.defs.plans.values import (
    Adapter,
    Candidate,
    Dataset,
    Evaluation,
    LoraFile,
    NotEvaluated,
    Promotion,
    Resumed,
    resumed,
)
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from automem_dagster.defs.resources import LLMEndpointsResource, MlflowResource, StorageResource
from automem_dagster.games import game_family
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.execution import IN_PROCESS, Execution
from automem_dagster.loop.proficiency import (
    ProficiencyResult,
    curated,
    dataset_dir,
    load_specialist_verdict,
    registry,
    training_record,
)
from automem_dagster.loop.records import TOO_SMALL
from automem_dagster.loop.report import RoundReport
from automem_dagster.loop.round_plan import PROFICIENCY_ROUND, STRUCTURE_ROUND, RoundPlan
from automem_dagster.loop.settings import ProficiencyConfig as ProficiencyLoop
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import Storage, slug
from automem_dagster.loop.structure import RoundResult, load_verdict
from automem_dagster.meta.curate import DatasetTooSmall
from automem_dagster.meta.lora_config import LoraChoice
from automem_dagster.meta.revise import Revision
from automem_dagster.paths import PROJECT_ROOT
from automem_dagster.rollout import load_summary
from automem_dagster.tracking import Tracker


def project_instance() -> dg.DagsterInstance:
    """The instance ``make dagster`` opens: ``$DAGSTER_HOME``, else the project's ``.dagster_home``
    (created with ``deploy/dagster.yaml``, as ``make dagster`` does). Telemetry is off for the CLI's runs whatever
    the home's ``dagster.yaml`` says: with it on, Dagster prints its welcome banner into a round's output the first
    time a home is used, between the round's own lines."""
    home = Path(os.environ.get("DAGSTER_HOME") or PROJECT_ROOT / ".dagster_home")
    home.mkdir(parents=True, exist_ok=True)
    config = PROJECT_ROOT / "deploy" / "dagster.yaml"
    if not (home / "dagster.yaml").exists() and config.exists():
        shutil.copy(config, home / "dagster.yaml")
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home), overrides=NO_TELEMETRY))


NO_TELEMETRY = {"telemetry": {"enabled": False}}
"""The instance setting that keeps Dagster's telemetry (and its banner) out of the CLI's runs."""


def run_structure_round(settings: StructureConfig, endpoints: Path, storage: Storage, tracker: Tracker | None,
                        meta: str = "endpoints", execution: Execution = IN_PROCESS) -> tuple[RoundResult, RoundReport, str]:
    """One structure round of ``settings.game``, whole, as a run of ``structure_full_round_job`` executed as
    ``execution`` says: what it produced, its plots and MLflow runs, and a line saying where the run shows."""
    values, run = _run(STRUCTURE_ROUND, "structure_full_round_job", settings.game,
                       _run_config(RoundConfig, settings, execution),
                       _resources(endpoints, storage, tracker, meta), execution)
    return *_structure_result(settings.game, storage, **values), run


def run_proficiency_round(settings: ProficiencyLoop, endpoints: Path, storage: Storage, tracker: Tracker | None,
                          meta: str = "endpoints", execution: Execution = IN_PROCESS
                          ) -> tuple[ProficiencyResult, RoundReport, str]:
    """One proficiency round of ``settings.game``, whole, as a run of ``proficiency_full_round_job`` executed as
    ``execution`` says. A dataset below the minimum ends the run before training, and the run succeeds
    (``sft_dataset`` observed as ``dataset_too_small``, the steps after it skipped); here it is
    ``meta.curate.DatasetTooSmall``, the designed stop the CLI's rounds print in one line."""
    config = _run_config(ProficiencyConfig, settings, execution)
    values, run = _run(PROFICIENCY_ROUND, "proficiency_full_round_job", settings.game, config,
                       _resources(endpoints, storage, tracker, meta), execution)
    return *_proficiency_result(settings.game, storage, **values), run


def _run_config(config: type[RoundConfig], settings: StructureConfig, execution: Execution) -> RoundConfig:
    """The run config of ``settings`` (the demo's proficiency config plays its structure round too: only the parts
    ``config`` has), sharded as ``execution`` says."""
    return config.model_validate({**settings.model_dump(include=set(config.model_fields)), "shards": execution.shards})


def _resources(endpoints: Path, storage: Storage, tracker: Tracker | None, meta: str) -> dict:
    mlflow = (MlflowResource(tracking_uri=tracker.tracking_uri, ui_url=tracker.ui_url,
                             artifact_root=str(tracker.artifact_root) if tracker.artifact_root else None)
              if tracker is not None else MlflowResource(enabled=False))
    return {"endpoints": LLMEndpointsResource(endpoints_file=str(endpoints), meta=meta),
            "storage": StorageResource.of(storage), "mlflow": mlflow}


def _run(plan: RoundPlan, job: str, game: str, config: RoundConfig, resources: dict,
         execution: Execution) -> tuple[dict, str]:
    """Execute ``job`` for ``game``'s partition on the project's instance with ``config`` for every step;
    returns each step's value by step name (None for a step the run did not reach), which the result
    builders take as parameters named after the plan's steps, and where the run shows. A failed step
    raises the error the step raised (``RoundError``, an endpoint's, ``DatasetTooSmall``)."""
    run_config = {"ops": {step: {"config": config.model_dump()} for step in plan.round_steps},
                  "loggers": {"console": {"config": {"log_level": "INFO"}}}}
    with project_instance() as instance:
        if execution.executor == "celery":
            values, run_id = run_on_celery(job, game, plan.names, config, run_config, resources, instance, execution,
                                           tags={DRIVER_TAG: CLI_DRIVER, "dagster/partition": slug(game)})
            return values, (f"Dagster: run {run_id} of {job} on Celery workers ({execution.broker}) in "
                            f"{instance.root_directory} (make dagster)")
        try:
            result = defs.resolve_job_def(job).execute_in_process(
                run_config=run_config, instance=instance, partition_key=slug(game), resources=resources,
                tags={DRIVER_TAG: CLI_DRIVER})
        except dg.DagsterExecutionStepExecutionError as exc:
            raise _raised(exc.user_exception) from exc
        except dg.Failure as exc:  # re-raised as it is by an in-process run
            raise _raised(exc) from exc
        home = instance.root_directory
    return ({step: _value(result, step) for step in plan.names},
            f"Dagster: run {result.run_id} of {job} in {home} (make dagster)")


def _raised(error: BaseException) -> BaseException:
    """The error a step raised: under a ``dg.Failure``, the one it was raised from (a too-small dataset)."""
    return error.__cause__ if isinstance(error, dg.Failure) and error.__cause__ is not None else error


def _value(result: dg.ExecuteInProcessResult, step: str):
    try:
        return result.asset_value(step)
    except dg.DagsterInvariantViolationError:
        return None


def _structure_result(game: str, storage: Storage, rollout_batch: str | Resumed, diagnosis,
                      scaffold_candidate: Candidate, candidate_evaluation: Evaluation | NotEvaluated | None,
                      champion_scaffold: Promotion | None) -> tuple[RoundResult, RoundReport]:
    """The CLI's account of a structure round from its steps' values (a parameter per step of the plan; the
    diagnosis is read from the folder the revision names, as a resumed candidate's is)."""
    result = RoundResult(game=game, parent=scaffold_candidate.parent, candidate=scaffold_candidate.candidate,
                         diagnosis_dir=Path(scaffold_candidate.diagnosis_dir) if scaffold_candidate.diagnosis_dir else None,
                         revision_dir=Path(scaffold_candidate.revision_dir) if scaffold_candidate.revision_dir else None)
    if resumed(rollout_batch) is None:
        result.rollout = load_summary(Path(rollout_batch))
    if scaffold_candidate.outcome == "resumed":
        result.notes.append(f"resumed pending candidate v{result.candidate} of an earlier round")
    elif scaffold_candidate.revision_dir:
        result.revision = Revision.load(Path(scaffold_candidate.revision_dir))
    elif scaffold_candidate.reason:  # no revision asked for: the meta-LLM gave no usable diagnosis
        result.notes.append(f"no candidate: {scaffold_candidate.reason}")
    if isinstance(candidate_evaluation, Evaluation):
        result.candidate_eval = load_summary(Path(candidate_evaluation.challenger_batch))
        result.champion_eval = load_summary(Path(candidate_evaluation.champion_batch))
        result.decision = load_verdict(storage, game, result.candidate)
    return result, champion_scaffold.report if champion_scaffold else RoundReport()


def _proficiency_result(game: str, storage: Storage, training_rollouts: str | Resumed | None,
                        sft_dataset: Dataset | Resumed | None, lora_config: LoraFile | Resumed | None,
                        lora_adapter: Adapter | None, specialist_evaluation: Evaluation | None,
                        champion_specialist: Promotion | None) -> tuple[ProficiencyResult, RoundReport]:
    """The CLI's account of a proficiency round from its steps' values (a parameter per step of the plan; the
    dataset is read from the folder the LoRA settings name)."""
    if sft_dataset is None and training_rollouts is not None and resumed(training_rollouts) is None:
        marker = dataset_dir(storage, Path(training_rollouts)) / TOO_SMALL
        if marker.exists():
            raise DatasetTooSmall(json.loads(marker.read_text())["too_small_reason"])
    if lora_adapter is None:
        raise RoundError(f"{game}: the proficiency round stopped before its adapter; its run in Dagster says why")
    record = registry(storage, game_family(game)).record(lora_adapter.adapter)
    result = ProficiencyResult(game, record.scaffold_version, record)
    if resumed(training_rollouts) is None:
        result.rollout = load_summary(Path(training_rollouts))
    if lora_adapter.outcome == "resumed":
        result.notes.append(f"resumed pending adapter {record.id} of an earlier round")
    else:
        result.dataset = curated(Path(lora_config.dataset.dataset_dir))
        result.choice = LoraChoice.load(Path(lora_config.config_file))
    result.training = training_record(record)
    report = lora_adapter.report
    if isinstance(specialist_evaluation, Evaluation):
        result.specialist_eval = load_summary(Path(specialist_evaluation.challenger_batch))
        result.champion_eval = load_summary(Path(specialist_evaluation.champion_batch))
        result.endpoints = specialist_evaluation.endpoints
        result.decision = load_specialist_verdict(storage, game, record.id)
        report = report | (champion_specialist.report if champion_specialist else RoundReport())
    return result, report
