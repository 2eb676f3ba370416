"""Prompt text for LOG and PLAN turns.

Static parts (the scaffold's prompt, the operation syntax, the action list) come first so a
server with prompt-prefix caching reuses them across steps; the parts that change every
step (file index, warnings, observation, recent history) come last. Everything here is
bounded (history length, index size), so input tokens per step stay flat as an episode grows.
"""

from __future__ import annotations

from automem_dagster.agent.grammar import READ_OPS
from automem_dagster.memory.ops import OP_SYNTAX, OpName
from automem_dagster.scaffold.model import Scaffold

ACTION_DESCRIPTION_LIMIT = 30
"""Above this many actions, list names only: NetHack's full set with descriptions would
cost about a thousand tokens per call."""

OP_SYNTAX_ACTION = "<|ACTION|>action<|END|>  choose the next game action"


def _op_lines(ops: list[OpName]) -> str:
    return "\n".join(OP_SYNTAX[op] for op in ops)


def _action_lines(actions: dict[str, str]) -> str:
    if len(actions) <= ACTION_DESCRIPTION_LIMIT:
        return "\n".join(f"{name}: {desc}" for name, desc in actions.items())
    return ", ".join(actions)


def file_index(scaffold: Scaffold, index: str) -> str:
    """The store's ``name (N lines)`` index with each scaffold file's purpose and policy."""
    notes = {}
    for f in scaffold.files:
        mode = {"reference": ", read-only", "synced": ", auto-updated, read-only",
                "keyed": ", one line per key: use UPSERT", "append_only": ", append-only"}.get(f.policy.mode, "")
        notes[f.name] = f" - {f.purpose}{mode}"
    return "\n".join(line + notes.get(line.split(" (")[0], "") for line in index.splitlines())


def log_system(scaffold: Scaffold) -> str:
    ops = [*scaffold.operations, OpName.DONE]
    return (
        f"{scaffold.log_prompt}\n\nMemory operations (one per line):\n{_op_lines(ops)}\n"
        "A read ends your turn; you get its result and may continue."
    )


def plan_system(scaffold: Scaffold, actions: dict[str, str], consult_only: bool = False) -> str:
    reads = [op for op in scaffold.operations if op in READ_OPS]
    ending = (
        "End with <|DONE|> when you have read enough; another model chooses the action."
        if consult_only
        else f"Then answer with the action:\n{OP_SYNTAX_ACTION}\nActions:\n{_action_lines(actions)}"
    )
    return (
        f"{scaffold.plan_prompt}\n\nRead-only memory operations (one per turn; you get the result):\n"
        f"{_op_lines(reads)}\n{ending}"
    )



def action_system(scaffold: Scaffold, actions: dict[str, str]) -> str:
    """The game model's prompt in two-model mode: no memory operations, only the action."""
    return f"{scaffold.plan_prompt}\n\nAnswer with the action:\n{OP_SYNTAX_ACTION}\nActions:\n{_action_lines(actions)}"


def step_message(
    step: int,
    observation: str,
    index: str,
    history: list[tuple[str, float]],
    warnings: list[str],
    previous_action: str | None = None,
    previous_reward: float | None = None,
) -> str:
    """The per-step user message: memory index, warnings, recent actions, the observation."""
    parts = [f"Memory files:\n{index}"]
    if warnings:
        parts.append("Warnings:\n" + "\n".join(f"- {w}" for w in warnings))
    if history:
        parts.append("Recent actions: " + ", ".join(f"{a} ({r:+g})" if r else a for a, r in history))
    if previous_action is not None:
        parts.append(f"Step {step}. Your previous action was {previous_action} (reward {previous_reward:+g}). Now:")
    else:
        parts.append(f"Step {step}. Now:")
    parts.append(observation)
    return "\n\n".join(parts)


def results_message(lines: list[str]) -> str:
    return "Results:\n" + "\n".join(lines) if lines else "Results: (none)"
