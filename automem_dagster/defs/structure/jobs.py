"""Jobs: a structure round up to the evaluation, and the promotion that decides on it."""

from __future__ import annotations

import dagster as dg

from automem_dagster.defs.common.run_tags import MODEL_ROUND_TAGS

structure_round_job = dg.define_asset_job(
    "structure_round_job",
    tags=MODEL_ROUND_TAGS,
    selection=dg.AssetSelection.assets("rollout_batch", "diagnosis", "scaffold_candidate", "candidate_evaluation"),
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
