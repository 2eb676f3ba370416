"""The gate on a specialist evaluation: would the adapter be kept? (Recorded nowhere: ``champion_specialist`` decides.)"""

import dagster as dg

from automem_dagster.defs.common.partitions import game_partitions
from automem_dagster.defs.proficiency.assets import specialist_evaluation
from automem_dagster.metrics.paired import GatePolicy, compare_paired, decide


@dg.asset_check(asset=specialist_evaluation, partitions_def=game_partitions, blocking=False)
def specialist_gate(specialist_evaluation: dict) -> dg.AssetCheckResult:
    """Passes iff the round's gate policy would keep the two-model agent against the one-model
    champion (the same policies as for scaffolds: strictly higher mean by default, or ``significant``);
    a tie or a loss fails with a warning."""
    scores = specialist_evaluation["per_seed"]
    decision = decide(compare_paired(scores["specialist"], scores["champion"]),
                      GatePolicy(**specialist_evaluation.get("gate", {})))
    c = decision.comparison
    return dg.AssetCheckResult(passed=decision.keep, severity=dg.AssetCheckSeverity.WARN, metadata={
        "adapter": specialist_evaluation["adapter"],
        "specialist_mean": c.candidate_mean,
        "champion_mean": c.champion_mean,
        "difference": c.mean_difference,
        "se": c.stderr_difference,
        "ci": f"[{c.ci_low:+.2f}, {c.ci_high:+.2f}]",
        "p_value": c.p_value,
        "gate": decision.policy.describe(),
        "reason": decision.reason,
    })
