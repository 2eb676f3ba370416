"""The gate on a candidate evaluation: would the candidate be kept? (``gate_check``; ``champion_scaffold`` decides.)"""

from functools import partial

from automem_dagster.defs.plans.challenger import CANDIDATE, gate_check, gate_result
from automem_dagster.defs.structure.assets import ASSETS

evaluation_gate = gate_check(
    CANDIDATE, ASSETS["candidate_evaluation"], "evaluation_gate",
    "What the round's gate policy would decide about the candidate (would: keep, roll back or inconclusive, with "
    "the reason): by default a gain beyond chance and the noise floor (significant), or with gate: higher_mean "
    "AutoMem's higher mean. A tie, a loss, an inconclusive comparison or a round without a candidate is an ordinary "
    "outcome and passes; only scores that cannot be paired fail.")

evaluation_gate_result = partial(gate_result, CANDIDATE)
"""The check's result for an evaluation value (also reported by the CLI's rounds)."""
