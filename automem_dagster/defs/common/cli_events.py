"""A round the CLI ran, reported to the project's Dagster instance as runless asset events.

``automem revise``, ``automem train`` and ``automem demo`` run whole rounds in one process, outside Dagster. So
that ``make dagster`` shows them (each asset materialized, the gate's check evaluated), the
CLI reports each stage's result to the instance ``make dagster`` opens, with the metadata the
assets themselves emit (built once, in ``defs/common/metadata.py`` and ``defs/common/challenger.py``).
Every event carries ``run_by: automem CLI``: the gate sensors skip those, since the CLI has
already taken the decision. The CLI imports this module lazily, so ``loop/`` stays free of Dagster.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg
from sqlalchemy.exc import IntegrityError

from automem_dagster.defs.common.challenger import candidate_evaluation_metadata
from automem_dagster.defs.common.metadata import (
    decision_metadata,
    diagnosis_metadata,
    no_candidate_metadata,
    no_decision_metadata,
    revision_metadata,
    rollout_metadata,
)
from automem_dagster.defs.common.partitions import game_partitions
from automem_dagster.defs.common.proficiency_metadata import (
    adapter_metadata,
    dataset_metadata,
    lora_config_metadata,
    specialist_decision_metadata,
    specialist_evaluation_metadata,
)
from automem_dagster.defs.common.versions import champion_data_version, data_version_tags, scaffold_version_event
from automem_dagster.defs.evaluation.checks import evaluation_gate_result
from automem_dagster.defs.proficiency.checks import specialist_gate_result
from automem_dagster.loop.gate import gate_scores
from automem_dagster.loop.paper_table import PaperTable
from automem_dagster.loop.proficiency import ProficiencyResult
from automem_dagster.loop.report import RoundReport, report_dir
from automem_dagster.loop.settings import RoundSettings
from automem_dagster.loop.storage import Storage, slug
from automem_dagster.loop.structure import RoundResult
from automem_dagster.meta.diagnose import Diagnosis
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.paths import PROJECT_ROOT
from automem_dagster.plots import png_markdown

RUN_BY = {"run_by": "automem CLI"}
"""Metadata on every event the CLI reports (``defs/common/sensors.py`` skips these)."""

Event = dg.AssetMaterialization | dg.AssetCheckEvaluation


def project_instance() -> dg.DagsterInstance:
    """The instance ``make dagster`` opens: ``$DAGSTER_HOME``, else the project's ``.dagster_home``
    (created with ``deploy/dagster.yaml``, as ``make dagster`` does)."""
    home = Path(os.environ.get("DAGSTER_HOME") or PROJECT_ROOT / ".dagster_home")
    home.mkdir(parents=True, exist_ok=True)
    config = PROJECT_ROOT / "deploy" / "dagster.yaml"
    if not (home / "dagster.yaml").exists() and config.exists():
        shutil.copy(config, home / "dagster.yaml")
    return dg.DagsterInstance.from_config(str(home))


def report_structure_round(result: RoundResult, report: RoundReport, storage: Storage,
                           settings: RoundSettings) -> str:
    """Report ``result`` to the project's instance; returns a line saying what was reported."""
    if slug(result.game) not in game_partitions.get_partition_keys():
        return f"Dagster: {result.game} is not one of the game partitions, so this round is not shown there"
    with project_instance() as instance:  # the new versions' partitions are added while the events are made
        events = structure_round_events(result, report, storage, settings, instance)
    return _report(events)


def structure_round_events(result: RoundResult, report: RoundReport, storage: Storage, settings: RoundSettings,
                           instance: dg.DagsterInstance) -> list[Event]:
    """The materializations and the gate check a Dagster run of the same round would have recorded,
    in the order of the graph; adds the ``scaffold_versions`` partitions of the versions involved."""
    game, family, key = result.game, settings.family, slug(result.game)

    def materialization(asset: str, metadata: dict, tags: dict | None = None) -> dg.AssetMaterialization:
        return _materialization(asset, key, metadata, tags)

    versions = [result.parent] + ([result.candidate] if result.candidate is not None else [])
    events: list[Event] = [scaffold_version_event(instance, storage, family, v, RUN_BY) for v in versions]
    champion = data_version_tags(champion_data_version(storage, family))
    if result.rollout is not None:
        seeds = sorted(e.seed for e in result.rollout.episodes)
        events.append(materialization("rollout_batch", rollout_metadata(result.rollout, result.parent, seeds)))
    if result.revision is not None:
        events.append(materialization("diagnosis", diagnosis_metadata(Diagnosis.load(result.diagnosis_dir),
                                                                      result.diagnosis_dir)))
        partition = f"{family}-v{result.revision.version}" if result.revision.accepted else None
        events.append(materialization("scaffold_candidate",
                                      revision_metadata(result.revision, result.revision_dir, partition)))
    if result.candidate_eval is None:
        reason = result.revision.rejected_reason if result.revision else "no candidate was evaluated"
        events += [materialization("candidate_evaluation", no_candidate_metadata(reason)),
                   _check("candidate_evaluation", "evaluation_gate",
                          evaluation_gate_result({"outcome": "no candidate", "reason": reason}), key),
                   materialization("champion_scaffold", no_decision_metadata(reason, storage, family), champion)]
        return events
    plot = report_dir(storage, game) / f"v{result.candidate}_behaviour.png"
    events.append(materialization("candidate_evaluation", candidate_evaluation_metadata(
        game, result.candidate_eval, result.champion_eval, plot, result.candidate, result.parent)))
    gate = evaluation_gate_result({"outcome": "evaluated", "candidate": result.candidate, "gate": settings.gate.as_dict(),
                                   **gate_scores(result.candidate_eval, result.champion_eval, "candidate", settings.gate)})
    events.append(_check("candidate_evaluation", "evaluation_gate", gate, key))
    if result.decision is not None:
        events.append(materialization("champion_scaffold",
                                      decision_metadata(result.decision, storage, report.runs, report.plots), champion))
    return events


def report_proficiency_round(result: ProficiencyResult, report: RoundReport, storage: Storage) -> str:
    """Report a proficiency round's ``result`` to the project's instance; returns a line saying what was reported."""
    if slug(result.game) not in game_partitions.get_partition_keys():
        return f"Dagster: {result.game} is not one of the game partitions, so this round is not shown there"
    return _report(proficiency_round_events(result, report, storage))


def proficiency_round_events(result: ProficiencyResult, report: RoundReport, storage: Storage) -> list[Event]:
    """The materializations and the gate check a Dagster run of the same proficiency round would have recorded."""
    game, key, adapter = result.game, slug(result.game), result.adapter
    events: list[Event] = []
    if result.rollout is not None:
        seeds = sorted(e.seed for e in result.rollout.episodes)
        events.append(_materialization("training_rollouts", key, rollout_metadata(result.rollout, result.scaffold_version,
                                                                                  seeds)))
    if result.dataset is not None:
        stats, out = result.dataset.stats, Path(result.dataset.out_dir)
        events.append(_materialization("sft_dataset", key, dataset_metadata(stats, out, result.scaffold_version),
                                       data_version_tags(dg.DataVersion(stats["dataset_hash"]))))
        events.append(_materialization("lora_config", key, lora_config_metadata(result.choice, out / "lora_config.json")))
    outcome = "trained" if result.dataset is not None else "resumed"
    events.append(_materialization("lora_adapter", key, adapter_metadata(
        game, adapter, result.training, report.plots["losses"], outcome, report.runs.get("training"))))
    if result.decision is None:
        return events
    plot = report_dir(storage, game) / f"{adapter.id}_behaviour.png"
    events.append(_materialization("specialist_evaluation", key, specialist_evaluation_metadata(
        game, adapter.id, result.scaffold_version, result.specialist_eval, result.champion_eval, plot, result.endpoints)))
    gate = specialist_gate_result({"outcome": "evaluated", "adapter": adapter.id, "gate": result.decision.gate, **gate_scores(
        result.specialist_eval, result.champion_eval, "specialist", GatePolicy(**result.decision.gate))})
    events.append(_check("specialist_evaluation", "specialist_gate", gate, key))
    runs = {role: run for role, run in report.runs.items() if role != "training"}
    events.append(_materialization("champion_specialist", key,
                                   specialist_decision_metadata(game, result.decision, runs, report.plots)))
    return events


def report_paper_table(table: PaperTable) -> str:
    """Show the paper's table (``automem table``) on the champion's page: an observation of the
    ``champion_scaffold`` partition carrying the table and its figure."""
    key = slug(table.game)
    if key not in game_partitions.get_partition_keys():
        return f"Dagster: {table.game} is not one of the game partitions, so the table is not shown there"
    metadata = {"first": f"v{table.first_version}", "final": f"v{table.final_version}",
                "seeds": ", ".join(map(str, table.seeds)), "max_steps": table.max_steps,
                "paper_table": dg.MetadataValue.md(table.markdown()),
                "paper_figure": dg.MetadataValue.md(png_markdown(Path(table.files["figure"]), "the paper's table")),
                "paper_table_json": dg.MetadataValue.path(table.files["json"]), **RUN_BY}
    with project_instance() as instance:
        instance.report_runless_asset_event(dg.AssetObservation(asset_key="champion_scaffold", partition=key,
                                                                metadata=metadata))
    return f"Dagster: the table is shown on champion_scaffold ({key}), as an observation (make dagster)"


def _report(events: list[Event]) -> str:
    """Report ``events``; a gate check already reported for the partition by an earlier CLI round is
    left as it was: Dagster 1.13's SQLite event log keeps one run-less evaluation per check and
    partition (a unique index on asset, check, run id "" and partition), so a second one would fail
    the whole report after the round itself had finished."""
    repeated = []
    with project_instance() as instance:
        for event in events:
            try:
                instance.report_runless_asset_event(event)
            except IntegrityError:
                if not isinstance(event, dg.AssetCheckEvaluation):
                    raise
                repeated.append(event.check_name)
        home = instance.root_directory
    said = f"Dagster: {len(events) - len(repeated)} events of this round reported to the instance in {home} (make dagster)"
    return said + (f"; the {', '.join(repeated)} check shows an earlier CLI round's evaluation (Dagster keeps one "
                   "run-less evaluation per check and partition)" if repeated else "")


def _materialization(asset: str, partition: str, metadata: dict, tags: dict | None = None) -> dg.AssetMaterialization:
    return dg.AssetMaterialization(asset_key=asset, partition=partition, metadata={**metadata, **RUN_BY}, tags=tags)


def _check(asset: str, check: str, result: dg.AssetCheckResult, partition: str) -> dg.AssetCheckEvaluation:
    """A check's ``result`` on ``asset``'s ``partition``, as the check would have recorded it in a run."""
    return dg.AssetCheckEvaluation(asset_key=dg.AssetKey(asset), check_name=check, passed=result.passed,
                                   metadata={**result.metadata, **RUN_BY}, severity=result.severity, partition=partition)
