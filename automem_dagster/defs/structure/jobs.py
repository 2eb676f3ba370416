"""Jobs: a structure round up to the evaluation, and the promotion that decides on it."""

from __future__ import annotations

import dagster as dg

from automem_dagster.defs.common.config import RoundConfig, default_run_config
from automem_dagster.defs.common.run_tags import MODEL_ROUND_TAGS

ROUND_ASSETS = ("rollout_batch", "diagnosis", "scaffold_candidate", "candidate_evaluation")

structure_round_job = dg.define_asset_job(
    "structure_round_job",
    tags=MODEL_ROUND_TAGS,
    selection=dg.AssetSelection.assets(*ROUND_ASSETS),
    config=default_run_config(ROUND_ASSETS, RoundConfig()),
    description="One structure-loop round for a game: rollouts of the champion, diagnosis, revision, and the "
                "evaluation of the candidate against the champion on the fixed seeds (with the evaluation_gate "
                "check). The decision is promote_job's, started by evaluation_gate_sensor.",
)

promote_job = dg.define_asset_job(
    "promote_job",
    selection=dg.AssetSelection.assets("champion_scaffold"),
    description="Keep or roll back the evaluated candidate of a game: moves the champion pointer on keep, "
                "logs both evaluations to MLflow and plots progression by version.",
)
