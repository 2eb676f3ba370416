"""The proficiency domain's definitions."""

from __future__ import annotations

import dagster as dg

from automem_dagster.defs.proficiency.assets import ASSETS
from automem_dagster.defs.proficiency.checks import specialist_gate
from automem_dagster.defs.proficiency.jobs import (
    proficiency_full_round_job,
    proficiency_round_job,
    promote_specialist_job,
)
from automem_dagster.defs.proficiency.sensors import new_champion_sensor, specialist_gate_sensor


def proficiency_definitions() -> dg.Definitions:
    return dg.Definitions(
        assets=list(ASSETS.values()),  # the plan's steps
        asset_checks=[specialist_gate],
        jobs=[proficiency_round_job, promote_specialist_job, proficiency_full_round_job],
        sensors=[specialist_gate_sensor, new_champion_sensor],
    )
