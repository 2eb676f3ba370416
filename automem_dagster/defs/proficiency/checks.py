"""The gate on a specialist evaluation: would the adapter be kept? (Recorded nowhere: ``champion_specialist`` decides.)"""

import dagster as dg

from automem_dagster.defs.common.gate import gate_check
from automem_dagster.defs.common.partitions import game_partitions
from automem_dagster.defs.proficiency.assets import specialist_evaluation


@dg.asset_check(asset=specialist_evaluation, partitions_def=game_partitions, blocking=False)
def specialist_gate(specialist_evaluation: dict) -> dg.AssetCheckResult:
    """Passes iff the round's gate policy would keep the two-model agent against the one-model
    champion (the same policies as for scaffolds: strictly higher mean by default, or ``significant``);
    a tie or a loss fails with a warning."""
    return gate_check(specialist_evaluation, "specialist", {"adapter": specialist_evaluation["adapter"]})
