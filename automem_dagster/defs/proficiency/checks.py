"""The gate on a specialist evaluation: would the adapter be kept? (Recorded nowhere: ``champion_specialist`` decides.)"""

import dagster as dg

from automem_dagster.defs.common.gate import gate_preview
from automem_dagster.defs.common.partitions import game_partitions, partitioned_checks
from automem_dagster.defs.proficiency.assets import specialist_evaluation

with partitioned_checks():
    @dg.asset_check(asset=specialist_evaluation, partitions_def=game_partitions, blocking=False)
    def specialist_gate(specialist_evaluation: dict) -> dg.AssetCheckResult:
        """What the round's gate policy would decide about the two-model agent against the one-model
        champion (``would``: keep or roll back; the same policies as for scaffolds). A tie or a loss is
        an ordinary outcome and passes; only scores that cannot be paired fail."""
        return specialist_gate_result(specialist_evaluation)


def specialist_gate_result(evaluation: dict) -> dg.AssetCheckResult:
    """The check's result for an evaluation value (also reported by the CLI's rounds)."""
    return gate_preview(evaluation, "specialist", {"adapter": evaluation["adapter"]})
