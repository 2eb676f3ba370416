"""The gate on an evaluation: would the candidate be kept? (Recorded nowhere: ``champion_scaffold`` decides.)"""

import dagster as dg

from automem_dagster.defs.common.gate import gate_preview, no_challenger_check
from automem_dagster.defs.common.partitions import game_partitions, partitioned_checks
from automem_dagster.defs.evaluation.assets import candidate_evaluation

with partitioned_checks():
    @dg.asset_check(asset=candidate_evaluation, partitions_def=game_partitions, blocking=False)
    def evaluation_gate(candidate_evaluation: dict) -> dg.AssetCheckResult:
        """What the round's gate policy would decide about the candidate (``would``: keep or roll back,
        with the reason): by default a strictly higher mean progression on the fixed seeds (AutoMem's
        rule), or with ``gate: significant`` a difference beyond chance. A tie, a loss or a round
        without a candidate is an ordinary outcome and passes; only scores that cannot be paired fail."""
        return evaluation_gate_result(candidate_evaluation)



def evaluation_gate_result(evaluation: dict) -> dg.AssetCheckResult:
    """The check's result for an evaluation value (also reported by the CLI's rounds)."""
    if evaluation["outcome"] != "evaluated":
        return no_challenger_check(f"no candidate: {evaluation.get('reason') or 'nothing was evaluated'}")
    return gate_preview(evaluation, "candidate", {"candidate": f"v{evaluation['candidate']}"})
