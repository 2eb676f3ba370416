"""Jobs: a structure round up to the evaluation, and the promotion that decides on it."""

from __future__ import annotations

from automem_dagster.defs.common.challenger import promotion_job, round_job
from automem_dagster.defs.common.config import RoundConfig

ROUND_ASSETS = ("rollout_batch", "diagnosis", "scaffold_candidate", "candidate_evaluation")

structure_round_job = round_job(
    "structure_round_job", ROUND_ASSETS, RoundConfig(),
    "One structure-loop round for a game: rollouts of the champion, diagnosis, revision, and the evaluation of "
    "the candidate against the champion on the fixed seeds (with the evaluation_gate check). The decision is "
    "promote_job's, started by evaluation_gate_sensor.",
)

promote_job = promotion_job(
    "promote_job", "champion_scaffold",
    "Keep or roll back the evaluated candidate of a game: moves the champion pointer on keep, logs both "
    "evaluations to MLflow and plots progression by version.",
)
