"""Jobs: a proficiency round up to the specialist's evaluation, and the promotion that decides on it."""

from __future__ import annotations

from automem_dagster.defs.common.challenger import promotion_job, round_job
from automem_dagster.defs.proficiency.config import ProficiencyConfig

ROUND_ASSETS = ("training_rollouts", "sft_dataset", "lora_config", "lora_adapter", "specialist_evaluation")

proficiency_round_job = round_job(
    "proficiency_round_job", ROUND_ASSETS, ProficiencyConfig(),
    "One proficiency-loop round for a game: training rollouts of the champion scaffold, curation of the SFT "
    "dataset, the LoRA configuration, training of the memory specialist, and the two-model agent's evaluation "
    "against the one-model champion on the fixed seeds (with the specialist_gate check). A pending adapter of an "
    "earlier round is evaluated instead of training another. The decision is promote_specialist_job's, started "
    "by specialist_gate_sensor.",
)

promote_specialist_job = promotion_job(
    "promote_specialist_job", "champion_specialist",
    "Keep or roll back the evaluated specialist of a game: moves the specialist pointer on keep, logs both "
    "evaluations to MLflow and plots them side by side.",
)
