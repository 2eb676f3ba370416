"""The gate on a specialist evaluation: would the adapter be kept? (``gate_check``; ``champion_specialist`` decides.)"""

from functools import partial

from automem_dagster.defs.plans.challenger import SPECIALIST, gate_check, gate_result
from automem_dagster.defs.proficiency.assets import ASSETS

specialist_gate = gate_check(
    SPECIALIST, ASSETS["specialist_evaluation"], "specialist_gate",
    "What the round's gate policy would decide about the two-model agent against the agent in service (would: "
    "keep or roll back; the same policies as for scaffolds). A tie or a loss is an ordinary outcome and passes; "
    "only scores that cannot be paired fail.")

specialist_gate_result = partial(gate_result, SPECIALIST)
"""The check's result for an evaluation value (also reported by the CLI's rounds)."""
