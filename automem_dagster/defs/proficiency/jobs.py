"""Jobs: a proficiency round up to the specialist's evaluation, the promotion that decides on it, and the
whole round in one run."""

from __future__ import annotations

from automem_dagster.defs.plans.challenger import promotion_job, round_job
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from automem_dagster.loop.round_plan import PROFICIENCY_ROUND

proficiency_round_job = round_job(
    "proficiency_round_job", PROFICIENCY_ROUND, ProficiencyConfig(),
    "One proficiency-loop round for a game: training rollouts of the champion scaffold, curation of the SFT "
    "dataset, the LoRA configuration, training of the memory specialist, and the two-model agent's evaluation "
    "against the agent in service on the fixed seeds (with the specialist_gate check). A pending adapter of an "
    "earlier round is evaluated instead of training another. The decision is promote_specialist_job's, started "
    "by specialist_gate_sensor.",
)

promote_specialist_job = promotion_job(
    "promote_specialist_job", PROFICIENCY_ROUND,
    "Keep or roll back the evaluated specialist of a game: moves the specialist pointer on keep, logs both "
    "evaluations to MLflow and plots them side by side.",
)

proficiency_full_round_job = round_job(
    "proficiency_full_round_job", PROFICIENCY_ROUND, ProficiencyConfig(),
    "A whole proficiency-loop round with its decision in one run: proficiency_round_job's steps, then "
    "champion_specialist. What `automem train` and the demo run; the gate sensor leaves its evaluations alone, "
    "since the run decides them itself.",
    decides=True,
)
