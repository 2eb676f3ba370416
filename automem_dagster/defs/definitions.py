"""All Dagster definitions: each domain's, merged, with the project's resources."""

from __future__ import annotations

import dagster as dg

from automem_dagster.defs.evaluation.definitions import evaluation_definitions
from automem_dagster.defs.proficiency.definitions import proficiency_definitions
from automem_dagster.defs.resources import default_resources
from automem_dagster.defs.structure.definitions import structure_definitions

defs = dg.Definitions.merge(
    structure_definitions(),
    evaluation_definitions(),
    proficiency_definitions(),
    dg.Definitions(resources=default_resources()),
)
