"""The structure domain's definitions."""

from __future__ import annotations

import dagster as dg

from automem_dagster.defs.structure.assets import ASSETS, scaffold_version
from automem_dagster.defs.structure.jobs import promote_job, structure_full_round_job, structure_round_job
from automem_dagster.defs.structure.schedules import weekly_structure_round
from automem_dagster.defs.structure.sensors import evaluation_gate_sensor, next_round_sensor, scaffold_versions_sensor


def structure_definitions() -> dg.Definitions:
    return dg.Definitions(
        assets=[scaffold_version, *ASSETS.values()],  # the plan's steps, candidate_evaluation among them
        jobs=[structure_round_job, promote_job, structure_full_round_job],
        sensors=[evaluation_gate_sensor, next_round_sensor, scaffold_versions_sensor],
        schedules=[weekly_structure_round],
    )
