"""The challenger model (``loop/challenger.py``) in Dagster, once for both loops: an evaluation's value,
the gate check that previews the decision, the job and the one promote path that take it once, and the
MLflow links it shows (the metadata of a paired evaluation is ``metadata/rounds.py``'s).

The structure loop's challenger is a scaffold candidate, the proficiency loop's a specialist adapter
(``CANDIDATE``, ``SPECIALIST``); both are judged against the champion in service on the same fixed
seeds, so their evaluation and promotion assets present the same figures in the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from automem_dagster.defs.common.config import default_run_config
from automem_dagster.defs.execution.partitions import game_of, game_partitions, partitioned_checks
from automem_dagster.defs.execution.run_tags import MODEL_ROUND_TAGS
from automem_dagster.defs.metadata.long_values import long_text
from automem_dagster.defs.plans.values import Evaluation, EvaluationPlan, NotEvaluated
from automem_dagster.defs.resources import MlflowResource
from automem_dagster.loop.challenger import Challenger, VerdictRecord, judge_challenger, load_verdict_record
from automem_dagster.loop.gate import gate_scores, verdict_of_scores
from automem_dagster.loop.noise import gate_floors, load_noise
from automem_dagster.loop.round_plan import RoundPlan
from automem_dagster.loop.storage import Storage
from automem_dagster.rollout import BatchSummary, load_summary
from automem_dagster.tracking import Tracker


@dataclass(frozen=True)
class Challenge:
    """How one loop's challenger shows in Dagster: its ``role`` (as the gate and the decision record
    name it), the metadata ``key`` naming it, and how the check labels it."""

    role: str
    key: str
    label: Callable[[Challenger], str] = str

    def labelled(self, evaluation: Evaluation) -> dict:
        return {self.key: self.label(evaluation.plan.challenger)}


CANDIDATE = Challenge("candidate", "candidate", lambda version: f"v{version}")
SPECIALIST = Challenge("specialist", "adapter")


def decide_once(context: dg.AssetExecutionContext, recorded: VerdictRecord | None, decide: Callable[[], VerdictRecord],
                mlflow: MlflowResource, label: str) -> tuple[VerdictRecord, Tracker | None]:
    """The decision a promotion shows: ``recorded`` when a retried run finds one (its MLflow runs
    were logged when it was taken, so no tracker), else a new one from ``decide`` with a tracker."""
    if recorded is not None:
        context.log.info(f"{label} was already decided: showing that decision (MLflow runs were logged then)")
        return recorded, None
    return decide(), mlflow.tracker()


def log_run_links(context: dg.AssetExecutionContext, runs: dict) -> None:
    """Each logged MLflow run's URL, in the run's log."""
    for role, run in runs.items():
        context.log.info(f"MLflow {role} run: {run.url}")


def gate_preview(evaluation: Evaluation, role: str, label: dict) -> dg.AssetCheckResult:
    """The preview of a promotion on an evaluation (its ``scores`` of the ``role``, candidate or specialist,
    against the champion as ``gate_scores`` wrote them, under its plan's ``gate``): what the gate would decide, with its
    reason, as metadata. A tie or a loss is an ordinary outcome of a round, so the check passes and
    ``would`` says ``roll back``; it fails (an error) only when the scores cannot be paired, a fault
    the promotion would refuse too. ``label`` names the challenger."""
    try:
        decision = verdict_of_scores(evaluation.scores, role, evaluation.plan.gate, **evaluation.noise_floor)
    except ValueError as exc:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR,
                                   metadata={**label, "would": "refuse to decide", **long_text("reason", str(exc))})
    c = decision.comparison
    return dg.AssetCheckResult(passed=True, metadata={
        **label,
        "would": {"kept": "keep", "rolled_back": "roll back", "inconclusive": "inconclusive: keep the champion"}[
            decision.outcome],
        "outcome": decision.outcome,
        f"{role}_mean": c.candidate_mean,
        "champion_mean": c.champion_mean,
        "difference": c.mean_difference,
        "se": c.stderr_difference,
        "ci": f"[{c.ci_low:+.2f}, {c.ci_high:+.2f}]",
        "p_value": c.p_value,
        "gate": decision.policy.describe(),
        **long_text("reason", decision.reason),
    })


def no_challenger_check(reason: str) -> dg.AssetCheckResult:
    """The gate on an evaluation that had nothing to evaluate (a rejected revision): passes, nothing to decide."""
    return dg.AssetCheckResult(passed=True, metadata={"would": "nothing to decide", **long_text("reason", reason)})


def gate_result(challenge: Challenge, evaluation: Evaluation | NotEvaluated) -> dg.AssetCheckResult:
    """The gate check's result on an evaluation value (the assets' checks and the CLI's rounds report it)."""
    if isinstance(evaluation, NotEvaluated):
        return no_challenger_check(f"no {challenge.role}: {evaluation.reason}")
    return gate_preview(evaluation, challenge.role, challenge.labelled(evaluation))


def gate_check(challenge: Challenge, evaluation: dg.AssetsDefinition, name: str, description: str):
    """The one gate asset check, made for ``evaluation`` (a game-partitioned asset): what the round's
    gate policy would decide about the challenger (``gate_result``). Recorded nowhere: the promotion decides."""
    with partitioned_checks():
        @dg.asset_check(asset=evaluation, name=name, partitions_def=game_partitions, blocking=False,
                        description=description)
        def check(value: Any) -> dg.AssetCheckResult:  # an Evaluation, or NotEvaluated
            return gate_result(challenge, value)
    return check


def round_job(name: str, plan: RoundPlan, config: dg.Config, description: str, decides: bool = False):
    """A loop's round up to its evaluation (``plan.round_steps``), or with ``decides`` the whole plan with its
    decision in the same run (the CLI's round); one run at a time on the model server (``MODEL_ROUND_TAGS``)."""
    assets = plan.names if decides else plan.round_steps
    return dg.define_asset_job(name, tags=MODEL_ROUND_TAGS, selection=dg.AssetSelection.assets(*assets),
                               config=default_run_config(plan.round_steps, config), description=description)


def promotion_job(name: str, plan: RoundPlan, description: str):
    """The job that takes a loop's decision: the plan's ``decision`` asset alone, started by the gate sensor."""
    return dg.define_asset_job(name, selection=dg.AssetSelection.assets(plan.decision), description=description)


def evaluated(challenge: Challenge, plan: EvaluationPlan, mine: BatchSummary, champion: BatchSummary,
              endpoints: dict, store: Storage) -> Evaluation:
    """An evaluation asset's value, what its gate check previews and ``promote`` decides on: the ``plan``,
    both batch folders, the gate's per-seed scores under the plan's gate, the noise floors of the
    champion's identity (``loop.noise``) and the endpoints that played."""
    return Evaluation(plan, mine.out_dir, champion.out_dir, gate_scores(mine, champion, challenge.role, plan.gate),
                      gate_floors(load_noise(store, champion), plan.gate.metric), endpoints)


def promote(context: dg.AssetExecutionContext, challenge: Challenge, evaluation: Evaluation, store: Storage,
            mlflow: MlflowResource) -> tuple[VerdictRecord, BatchSummary, BatchSummary, Tracker | None]:
    """The one promote path: the decision on the evaluated challenger, taken once (``decide_once``) under
    the gate the evaluation recorded, with both batches and, for a new decision, the tracker to log it."""
    game, challenger = game_of(context.partition_key), evaluation.plan.challenger
    mine = load_summary(Path(evaluation.challenger_batch))
    champion = load_summary(Path(evaluation.champion_batch))
    record, tracker = decide_once(context, load_verdict_record(store, game, challenge.role, challenger),
                                  lambda: judge_challenger(challenge.role, game, challenger, (mine, champion), store,
                                                            evaluation.plan.gate), mlflow,
                                  challenge.labelled(evaluation)[challenge.key])
    context.log.info(record.reason)
    return record, mine, champion, tracker
