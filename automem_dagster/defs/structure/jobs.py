"""Jobs: a structure round up to the evaluation, the promotion that decides on it, and the whole round in one run."""

from __future__ import annotations

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.plans.challenger import promotion_job, round_job
from automem_dagster.loop.round_plan import STRUCTURE_ROUND

structure_round_job = round_job(
    "structure_round_job", STRUCTURE_ROUND, RoundConfig(),
    "One structure-loop round for a game: rollouts of the champion, diagnosis, revision, and the evaluation of "
    "the candidate against the champion on the fixed seeds (with the evaluation_gate check). The decision is "
    "promote_job's, started by evaluation_gate_sensor.",
)

promote_job = promotion_job(
    "promote_job", STRUCTURE_ROUND,
    "Keep or roll back the evaluated candidate of a game: moves the champion pointer on keep, logs both "
    "evaluations to MLflow and plots progression by version.",
)

structure_full_round_job = round_job(
    "structure_full_round_job", STRUCTURE_ROUND, RoundConfig(),
    "A whole structure-loop round with its decision in one run: structure_round_job's steps, then "
    "champion_scaffold. What `automem revise`, `automem rounds` and the demo run; the gate sensor leaves its "
    "evaluations alone, since the run decides them itself.",
    decides=True,
)
