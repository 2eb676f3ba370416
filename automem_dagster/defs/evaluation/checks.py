"""The gate on a candidate evaluation: would the candidate be kept? (``gate_check``; ``champion_scaffold`` decides.)"""

from functools import partial

from automem_dagster.defs.common.challenger import CANDIDATE, gate_check, gate_result
from automem_dagster.defs.evaluation.assets import candidate_evaluation

evaluation_gate = gate_check(
    CANDIDATE, candidate_evaluation, "evaluation_gate",
    "What the round's gate policy would decide about the candidate (would: keep or roll back, with the reason): "
    "by default a strictly higher mean progression on the fixed seeds (AutoMem's rule), or with gate: significant "
    "a difference beyond chance. A tie, a loss or a round without a candidate is an ordinary outcome and passes; "
    "only scores that cannot be paired fail.")

evaluation_gate_result = partial(gate_result, CANDIDATE)
"""The check's result for an evaluation value (also reported by the CLI's rounds)."""
