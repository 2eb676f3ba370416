"""What a person looks at after a round: MLflow runs and plots, made from the round's files.

Both are derived from files the stages wrote (evaluation summaries, decisions, the lineage),
so a report can be rebuilt at any time, and the CLI and the Dagster assets show the same
figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from automem_dagster.games import game_family
from automem_dagster.loop.structure import DecisionRecord, RoundResult, Storage, per_seed, slug
from automem_dagster.plots import VersionPoint, plot_behaviour, plot_progression_by_version
from automem_dagster.rollout import BatchSummary
from automem_dagster.scaffold import content_hash, load_scaffold
from automem_dagster.scaffold.io import scaffold_yaml
from automem_dagster.tracking import EvaluationRun, TrackedRun, Tracker


@dataclass
class RoundReport:
    runs: dict[str, TrackedRun] = field(default_factory=dict)
    plots: dict[str, Path] = field(default_factory=dict)


def report_dir(storage: Storage, game: str) -> Path:
    return storage.runs / "reports" / slug(game)


def version_points(storage: Storage, game: str) -> list[VersionPoint]:
    """Progression ± SE per evaluated version of ``game``, from its decision records; the
    latest evaluation of a version wins, and the decision is the lineage's."""
    lineage = storage.load_lineage(game_family(game))
    champion = lineage.champion().version
    scores: dict[int, tuple[float, float]] = {}
    for path in sorted((storage.runs / "decisions" / slug(game)).glob("v*.json"), key=lambda p: int(p.stem[1:])):
        record = DecisionRecord(**json.loads(path.read_text()))
        for version, batch in ((record.champion_before, record.champion_batch), (record.candidate, record.candidate_batch)):
            progression = json.loads((Path(batch) / "summary.json").read_text())["progression"]
            scores[version] = (progression["mean"], progression["stderr"])
    points = []
    for r in lineage.versions:
        if r.version in scores:
            decision = "champion" if r.version == champion else (r.decision or "pending")
            points.append(VersionPoint(r.version, *scores[r.version], decision))
    return points


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
        scaffold_yaml=scaffold_yaml(scaffold), **extra,
    )


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
    d = result.decision
    comparison = d.comparison
    decision = {"keep": bool(d.keep), "reason": d.reason, **{k: comparison[k] for k in
                ("mean_difference", "stderr_difference", "ci_low", "ci_high")}}
    round_id = f"r{result.candidate}"
    diagnosis_md = (result.diagnosis_dir / "diagnosis.md").read_text() if result.diagnosis_dir else None
    diff_md = (result.revision_dir / "diff.md").read_text() if result.revision_dir else None
    report.runs["candidate"] = tracker.log_evaluation(evaluation_run(
        result.game, result.candidate_eval, result.candidate, "candidate", endpoints, storage, max_steps, round_id,
        diagnosis_md=diagnosis_md, diff_md=diff_md, decision=decision, plots=list(report.plots.values())))
    report.runs["champion"] = tracker.log_evaluation(evaluation_run(
        result.game, result.champion_eval, result.parent, "champion", endpoints, storage, max_steps, round_id))
    return report
