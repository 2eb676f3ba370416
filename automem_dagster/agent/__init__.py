"""The LOG + PLAN memory agent, its prompts, turn grammars and derived signals."""

from automem_dagster.agent.memory_agent import Decision, MemoryAgent, OpRecord, TurnRecord

__all__ = ["Decision", "MemoryAgent", "OpRecord", "TurnRecord"]
