"""The gate on an evaluation: would the candidate be kept? (Recorded nowhere: ``champion_scaffold`` decides.)"""

import dagster as dg

from automem_dagster.defs.common.gate import gate_check
from automem_dagster.defs.common.partitions import game_partitions
from automem_dagster.defs.evaluation.assets import candidate_evaluation


@dg.asset_check(asset=candidate_evaluation, partitions_def=game_partitions, blocking=False)
def evaluation_gate(candidate_evaluation: dict) -> dg.AssetCheckResult:
    """Passes iff the round's gate policy would keep the candidate: by default a strictly higher mean
    progression on the fixed seeds (AutoMem's rule), or with ``gate: significant`` a difference beyond
    chance; a tie or a loss fails with a warning, as does a round without a candidate."""
    if candidate_evaluation["outcome"] != "evaluated":
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata={
            "reason": f"no candidate: {candidate_evaluation.get('reason') or 'nothing was evaluated'}"})
    return gate_check(candidate_evaluation, "candidate", {"candidate": f"v{candidate_evaluation['candidate']}"})
