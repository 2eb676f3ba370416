"""The proficiency domain's definitions."""

from __future__ import annotations

import dagster as dg

from automem_dagster.defs.proficiency.assets import (
    champion_specialist,
    lora_adapter,
    lora_config,
    sft_dataset,
    specialist_evaluation,
    training_rollouts,
)
from automem_dagster.defs.proficiency.checks import specialist_gate
from automem_dagster.defs.proficiency.jobs import (
    proficiency_full_round_job,
    proficiency_round_job,
    promote_specialist_job,
)
from automem_dagster.defs.proficiency.sensors import new_champion_sensor, specialist_gate_sensor


def proficiency_definitions() -> dg.Definitions:
    return dg.Definitions(
        assets=[training_rollouts, sft_dataset, lora_config, lora_adapter, specialist_evaluation, champion_specialist],
        asset_checks=[specialist_gate],
        jobs=[proficiency_round_job, promote_specialist_job, proficiency_full_round_job],
        sensors=[specialist_gate_sensor, new_champion_sensor],
    )
