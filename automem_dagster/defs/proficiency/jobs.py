"""Jobs: a proficiency round up to the specialist's evaluation, and the promotion that decides on it."""

from __future__ import annotations

import dagster as dg

from automem_dagster.defs.common.config import default_run_config
from automem_dagster.defs.common.run_tags import MODEL_ROUND_TAGS
from automem_dagster.defs.proficiency.config import ProficiencyConfig

ROUND_ASSETS = ("training_rollouts", "sft_dataset", "lora_config", "lora_adapter", "specialist_evaluation")

proficiency_round_job = dg.define_asset_job(
    "proficiency_round_job",
    tags=MODEL_ROUND_TAGS,
    selection=dg.AssetSelection.assets(*ROUND_ASSETS),
    config=default_run_config(ROUND_ASSETS, ProficiencyConfig()),
    description="One proficiency-loop round for a game: training rollouts of the champion scaffold, curation of "
                "the SFT dataset, the LoRA configuration, training of the memory specialist, and the two-model "
                "agent's evaluation against the one-model champion on the fixed seeds (with the specialist_gate "
                "check). A pending adapter of an earlier round is evaluated instead of training another. The "
                "decision is promote_specialist_job's, started by specialist_gate_sensor.",
)

promote_specialist_job = dg.define_asset_job(
    "promote_specialist_job",
    selection=dg.AssetSelection.assets("champion_specialist"),
    description="Keep or roll back the evaluated specialist of a game: moves the specialist pointer on keep, "
                "logs both evaluations to MLflow and plots them side by side.",
)
