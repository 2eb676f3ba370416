"""The LOG + PLAN memory agent, its prompts, turn grammars and derived signals."""

from automem_dagster.agent.memory_agent import MemoryAgent
from automem_dagster.agent.step_records import OpRecord, StepOutcome, TurnRecord

__all__ = ["MemoryAgent", "OpRecord", "StepOutcome", "TurnRecord"]
