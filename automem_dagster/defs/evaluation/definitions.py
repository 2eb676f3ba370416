"""The evaluation domain's definitions."""

from __future__ import annotations

import dagster as dg

from automem_dagster.defs.evaluation.checks import evaluation_gate


def evaluation_definitions() -> dg.Definitions:
    """The gate check on the candidate's evaluation (the asset itself is built with the structure plan's)."""
    return dg.Definitions(asset_checks=[evaluation_gate])
