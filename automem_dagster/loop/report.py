"""What a person looks at after a round: MLflow runs and plots, made from the round's files.

Both are derived from files the stages wrote (evaluation summaries, decisions, the lineage),
so a report can be rebuilt at any time, and the CLI and the Dagster assets show the same
figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from automem_dagster.games import game_family
from automem_dagster.loop.challenger import VerdictRecord
from automem_dagster.loop.gate import per_seed
from automem_dagster.loop.storage import Storage, slug
from automem_dagster.loop.structure import RoundResult
from automem_dagster.meta.curate import STATS_FILE
from automem_dagster.meta.dataset_card import CARD, EFFECTS_PLOT
from automem_dagster.meta.diagnose import Diagnosis
from automem_dagster.meta.diagnosis_record import DIAGNOSIS_MD_FILE
from automem_dagster.meta.lora_config import LORA_CONFIG_FILE
from automem_dagster.meta.revise import DIFF_FILE, REVISION_FILE
from automem_dagster.plots import (
    AgentPoint,
    VersionPoint,
    plot_agent_comparison,
    plot_behaviour,
    plot_losses,
    plot_progression_by_version,
)
from automem_dagster.rollout import BatchSummary
from automem_dagster.rollout.summary import SUMMARY_FILE
from automem_dagster.rollout.trajectory import finished_episodes, read_manifest, read_trajectory
from automem_dagster.scaffold import content_hash, load_scaffold
from automem_dagster.scaffold.io import scaffold_yaml
from automem_dagster.tracking import EvaluationRun, TrackedRun, TrainingRun
from automem_dagster.tracking.runs import COST_PER_STEP
from automem_dagster.training.registry import AdapterRecord, SpecialistRegistry
from automem_dagster.training.sft_result import FIGURES, TRAINED_ON

if TYPE_CHECKING:
    from automem_dagster.tracking.mlflow_tracking import Tracker


@dataclass
class RoundReport:
    """The plots a round drew and the MLflow runs it logged, by name (a decision asset's value carries it to
    whoever ran the round: ``defs/plans/values.Promotion``)."""

    runs: dict[str, TrackedRun] = field(default_factory=dict)
    plots: dict[str, Path] = field(default_factory=dict)

    def __or__(self, other: RoundReport) -> RoundReport:
        return RoundReport(self.runs | other.runs, self.plots | other.plots)


def report_dir(storage: Storage, game: str) -> Path:
    return storage.runs / "reports" / slug(game)


def version_points(storage: Storage, game: str) -> list[VersionPoint]:
    """Progression ± SE per evaluated version of ``game``, from its decision records; the
    latest evaluation of a version wins, and the decision is the lineage's."""
    lineage = storage.load_lineage(game_family(game))
    champion = lineage.champion().version
    scores: dict[int, tuple[float, float]] = {}
    for path in sorted((storage.runs / "decisions" / slug(game)).glob("v*.json"), key=lambda p: int(p.stem[1:])):
        record = VerdictRecord.from_json(json.loads(path.read_text()))
        for version, batch in ((record.champion_before, record.champion_batch), (record.challenger, record.challenger_batch)):
            progression = json.loads((Path(batch) / SUMMARY_FILE).read_text())["progression"]
            scores[version] = (progression["mean"], progression["stderr"])
    points = []
    for r in lineage.versions:
        if r.version in scores:
            decision = "champion" if r.version == champion else (r.decision or "pending")
            points.append(VersionPoint(r.version, *scores[r.version], decision))
    return points


def batch_span_ms(batch: Path) -> tuple[int, int] | None:
    """When ``batch`` was played: its first episode's ``started_at`` and last one's ``finished_at``
    (ms since the epoch); None for a batch with no finished episode."""
    spans = []
    for path in finished_episodes(batch):
        header, _, end = read_trajectory(path)
        if header.get("started_at") and end.get("finished_at"):
            spans.append((datetime.fromisoformat(header["started_at"]), datetime.fromisoformat(end["finished_at"])))
    if not spans:
        return None
    return int(min(s for s, _ in spans).timestamp() * 1000), int(max(f for _, f in spans).timestamp() * 1000)


def evaluation_run(game: str, summary: BatchSummary, version: int, role: str, endpoints: dict, storage: Storage,
                   max_steps: int, round_id: str | None = None, **extra) -> EvaluationRun:
    """The MLflow record of one evaluation batch of scaffold ``version``."""
    family = game_family(game)
    scaffold = load_scaffold(family, version, storage.scaffolds)
    seeds = sorted(e.seed for e in summary.episodes)
    return EvaluationRun(
        game=game, family=family, version=version, parent=scaffold.parent, content_hash=content_hash(scaffold),
        role=role, round_id=round_id, seeds=seeds, max_steps=max_steps, endpoints=endpoints,
        progression_mean=summary.progression.mean, progression_se=summary.progression.stderr,
        per_seed={s: 100 * p for s, p in per_seed(summary).items()}, behaviour=summary.behaviour.as_dict(),
        retries=summary.retries.as_metrics() if summary.retries else {}, scaffold_yaml=scaffold_yaml(scaffold),
        batch=str(summary.out_dir), span_ms=batch_span_ms(Path(summary.out_dir)),
        identity=read_manifest(Path(summary.out_dir)).get("identity"), **extra,
    )


def revision_record(revision_dir: Path | None) -> dict:
    """A round's ``revision.json`` (empty when there is none)."""
    path = Path(revision_dir) / REVISION_FILE if revision_dir else None
    return json.loads(path.read_text()) if path is not None and path.exists() else {}


def revision_meta(revision_dir: Path | None) -> str | None:
    """Which meta made a round's candidate, as its ``revision.json`` recorded it (None before that was recorded)."""
    return revision_record(revision_dir).get("meta") or None


def revision_metrics(revision_dir: Path | None) -> dict:
    """What the revision cost, beside the diagnosis's (``Diagnosis.tracking_summary``), so the meta modes are
    compared on the whole round: its tool calls and its tokens (of the tool conversation, else of its attempts)."""
    record = revision_record(revision_dir)
    if not record.get("attempts") and not record.get("cost"):
        return {}  # the rules meta, or a revision recorded before its cost was
    cost = record.get("cost") or {}
    tokens = (cost["input_tokens"] + cost["output_tokens"] if cost
              else sum(a["input_tokens"] + a["output_tokens"] for a in record["attempts"]))
    return {"revision_tool_calls": cost.get("tool_calls", 0), "revision_tokens": tokens}


def report_round(result: RoundResult, storage: Storage, tracker: Tracker | None, endpoints: dict,
                 max_steps: int) -> RoundReport:
    """Plots for the round, and (with a tracker) one MLflow run per evaluated version."""
    report = RoundReport()
    if result.decision is None:
        return report
    out = report_dir(storage, result.game)
    report.plots["progression"] = plot_progression_by_version(
        version_points(storage, result.game), f"{result.game}: progression by scaffold version",
        out / "progression_by_version.png")
    report.plots["behaviour"] = plot_behaviour(
        result.candidate_eval.behaviour.as_dict(), result.champion_eval.behaviour.as_dict(),
        f"{result.game}: v{result.candidate} vs v{result.parent}", out / f"v{result.candidate}_behaviour.png",
        candidate_label=f"candidate v{result.candidate}", champion_label=f"champion v{result.parent}")
    if tracker is None:
        return report
    decision = result.decision.tracked()
    round_id = f"r{result.candidate}"
    diagnosis_md = (result.diagnosis_dir / DIAGNOSIS_MD_FILE).read_text() if result.diagnosis_dir else None
    diagnosis = Diagnosis.load(result.diagnosis_dir).tracking_summary() if result.diagnosis_dir else None
    if diagnosis is not None:
        diagnosis["metrics"] |= revision_metrics(result.revision_dir)
    diff_md = (result.revision_dir / DIFF_FILE).read_text() if result.revision_dir else None
    report.runs["candidate"] = tracker.log_evaluation(evaluation_run(
        result.game, result.candidate_eval, result.candidate, "candidate", endpoints, storage, max_steps, round_id,
        diagnosis_md=diagnosis_md, diff_md=diff_md, verdict=decision, diagnosis=diagnosis,
        plots=list(report.plots.values()), meta=revision_meta(result.revision_dir)))
    from automem_dagster.tracking.batches import log_champion_once  # needs MLflow, which a tracker implies

    report.runs["champion"] = log_champion_once(tracker, evaluation_run(
        result.game, result.champion_eval, result.parent, "champion", endpoints, storage, max_steps, round_id),
        report.runs["candidate"])
    return report


def report_training(game: str, adapter: AdapterRecord, training: dict, storage: Storage,
                    tracker: Tracker | None) -> tuple[Path, TrackedRun | None]:
    """The loss plot of an adapter's training and (with a tracker) its MLflow run, which also
    registers the adapter as a new version of the model ``automem-<family>-specialist``."""
    plot = plot_losses(training["train_loss"], training["validation_loss"],
                       f"{game}: LoRA specialist {adapter.id} training", report_dir(storage, game) / f"{adapter.id}_loss.png")
    reg = SpecialistRegistry.load(game_family(game), storage.specialists)
    if tracker is None or reg.record(adapter.id).training_run is not None:
        return plot, None       # not tracked, or logged already (a resumed round)
    data_dir = Path(adapter.dataset_dir)
    run = tracker.log_training(TrainingRun(
        game=game, family=game_family(game), scaffold_version=adapter.scaffold_version, adapter=adapter.id,
        base=training["base"], settings=training["settings"], settings_source=adapter.settings_source,
        dataset_hash=adapter.dataset, examples_train=training["examples_train"],
        examples_validation=training["examples_validation"], train_loss=training["train_loss"],
        validation_loss=training["validation_loss"],
        figures={**{k: training[k] for k in FIGURES if training.get(k) is not None}, **curation_figures(data_dir)},
        trained_on={k: training[k] for k in TRAINED_ON if training.get(k) not in (None, "")},
        adapter_dir=Path(adapter.adapter_dir),
        artifacts=[p for p in (data_dir / STATS_FILE, data_dir / LORA_CONFIG_FILE, data_dir / CARD,
                                data_dir / EFFECTS_PLOT, plot) if p.exists()]))
    with SpecialistRegistry.updating(game_family(game), storage.specialists) as reg:
        reg.mark_logged(adapter.id, run.run_id)
    return plot, run


def curation_figures(data_dir: Path) -> dict[str, float]:
    """The dataset's calibration and effect figures as the training run's metrics (``curation.*``):
    decisions replayed, their Spearman agreement with the cheap score, the share of cheap acceptances
    with an effect above 0, the credit floor, the eligible decisions left unmeasured, and the kept
    decisions by how they were measured (``curation.kept_unmeasured``: kept by request, unmeasured)."""
    path = Path(data_dir) / STATS_FILE
    if not path.exists():
        return {}
    stats = json.loads(path.read_text())
    calibration = stats.get("calibration") or {}
    figures = {f"curation.{k}": calibration.get(k) for k in (
        "replayed", "spearman", "effect_above_zero", "cheap_accepted_effect_above_zero")}
    replay = stats.get("replay") or {}
    figures.update({"curation.floor": replay.get("floor"), "curation.unmeasured": replay.get("unmeasured")})
    for method, count in (stats.get("kept_effects") or {}).get("method", {}).items():
        figures[f"curation.kept_{method}"] = count
    return {k: float(v) for k, v in figures.items() if v is not None}


def report_specialist(game: str, adapter: AdapterRecord, decision: VerdictRecord, specialist: BatchSummary,
                      champion: BatchSummary, endpoints: dict, storage: Storage, tracker: Tracker | None,
                      max_steps: int, extra_plots: list[Path] = ()) -> RoundReport:
    """Plots of the gate (progression and behaviour, specialist vs the agent in service) and, with a
    tracker, one MLflow run each for the specialist (role ``specialist``) and the champion, and the
    decision on the adapter's registered model version (``champion`` alias when kept)."""
    report = RoundReport()
    out = report_dir(storage, game)
    version = decision.scaffold_version
    champion_label, specialist_label = f"v{version}", f"v{version} + {adapter.id}"
    report.plots["progression"] = plot_agent_comparison(
        [AgentPoint(champion_label, champion.progression.mean, champion.progression.stderr, "champion"),
         AgentPoint(specialist_label, specialist.progression.mean, specialist.progression.stderr,
                    decision.outcome)],
        f"{game}: agent in service vs new specialist", out / f"{adapter.id}_progression.png")
    report.plots["behaviour"] = plot_behaviour(
        specialist.behaviour.as_dict(), champion.behaviour.as_dict(), f"{game}: specialist {adapter.id} vs one model",
        out / f"{adapter.id}_behaviour.png", candidate_label=specialist_label, champion_label=champion_label)
    if tracker is None:
        return report
    from automem_dagster.tracking.batches import log_champion_once  # these need MLflow, which a tracker implies
    from automem_dagster.tracking.model_registry import record_specialist_verdict

    outcome = decision.tracked()
    one_model = {k: v for k, v in endpoints.items() if k != "memory"}
    report.runs["specialist"] = tracker.log_evaluation(evaluation_run(
        game, specialist, version, "specialist", endpoints, storage, max_steps, adapter.id, adapter=adapter.id,
        verdict=outcome, plots=[*report.plots.values(), *extra_plots]))
    report.runs["champion"] = log_champion_once(tracker, evaluation_run(
        game, champion, version, "champion", one_model, storage, max_steps, adapter.id), report.runs["specialist"])
    record_specialist_verdict(tracker, game_family(game), adapter.id, decision.keep, decision.reason,
                               decision.outcome)
    return report


def agent_points(rows: list[dict], game: str, seeds: str, max_steps: int) -> list[AgentPoint]:
    """One point per agent evaluated on exactly ``seeds`` ("42,43") and ``max_steps`` for ``game``
    (the newest run of each wins; a rag baseline per retriever), ordered as a reader compares them:
    random, the baselines without memory, the memory baselines (rag, summary), each scaffold version,
    then scaffold + specialist; each with its per-step cost where the run logged it. Runs played by
    different models (tag ``automem.models``) are different points, labelled with their models, so two
    models' scores are never shown as one agent's. ``rows``: ``Tracker.runs_for``."""
    latest: dict[tuple, dict] = {}
    for row in rows:                       # newest first, so the first seen is kept
        comparable = row["game"] == game and row["seeds"] == seeds and row["max_steps"] == max_steps
        if comparable and row["role"] != "training" and row["progression_mean"] is not None:
            variant = (row.get("settings") or {}).get("retriever", "")
            latest.setdefault((row["agent"], row["version"] if row["agent"] == "memory" else None, row["adapter"],
                               variant, row.get("models") or ""), row)
    several = len({models for *_, models in latest if models}) > 1
    order = {"random": 0, "window": 1, "cot": 2, "rag": 3, "summary": 4, "memory": 5}
    points = []
    for (agent, version, adapter, variant, models), row in sorted(
            latest.items(), key=lambda kv: (order[kv[0][0]], kv[0][2] is not None, kv[0][1] or 0, kv[0][2] or "",
                                            kv[0][3], kv[0][4])):
        if agent != "memory":
            label, kind = f"{agent} ({variant})" if variant else agent, "baseline"
        elif adapter:
            label, kind = f"v{version} + {adapter}", "specialist"
        else:
            label, kind = f"v{version}", {"kept": "kept", "rolled_back": "rolled_back", "inconclusive": "inconclusive"}.get(
                row["decision"], "champion")
        label += f" ({models})" if several and models else ""
        costs = {key: row[key] for key in COST_PER_STEP if row.get(key) is not None}
        points.append(AgentPoint(label, row["progression_mean"], row["progression_se"] or 0.0, kind, costs,
                                 row.get("identity")))
    return points
