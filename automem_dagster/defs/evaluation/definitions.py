"""The evaluation domain's definitions."""

from __future__ import annotations

import dagster as dg

from automem_dagster.defs.evaluation.assets import candidate_evaluation
from automem_dagster.defs.evaluation.checks import evaluation_gate


def evaluation_definitions() -> dg.Definitions:
    return dg.Definitions(assets=[candidate_evaluation], asset_checks=[evaluation_gate])
