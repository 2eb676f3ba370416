"""Prompt text for LOG and PLAN turns.

Every call of one role shares one system prompt (the scaffold's LOG and PLAN instructions,
the operation syntax, the action list), and the phase is named at the end of the user
message. A server with prompt-prefix caching (llama.cpp, vLLM) therefore reuses the whole
system prompt across phases, steps and concurrent episodes, and only the per-step part is
processed again. The per-step message puts what both phases of a step share first (the step,
the previous action, the observation, the history, the warnings) and what LOG changes (the
memory index) and the phase last, so PLAN's call reuses LOG's prefix too. Everything per
step is bounded (history length, index, read results), so input tokens per step stay flat as
an episode grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from automem_dagster.agent.grammar import READ_OPS
from automem_dagster.memory.ops import OP_SYNTAX, OpName
from automem_dagster.scaffold.model import Scaffold

ACTION_DESCRIPTION_LIMIT = 30
"""Above this many actions, list names only: NetHack's full set with descriptions would
cost about a thousand tokens per call."""

ACTION_SYNTAX = "<|ACTION|>action<|END|>  the next game action"

Role = Literal["agent", "memory", "game"]
"""``agent`` does everything (one-model mode); in two-model mode ``memory`` does the memory
operations and ``game`` only chooses the action."""

LOG_PHASE = "Phase: LOG. Record what your previous action led to: write operations, then <|DONE|>."
PLAN_PHASE = ("Phase: PLAN. Read memory if useful (reads only, several in one turn; you get the results), "
              "then answer {ending}.")


def _action_lines(actions: dict[str, str]) -> str:
    if len(actions) <= ACTION_DESCRIPTION_LIMIT:
        return "\n".join(f"{name}: {desc}" for name, desc in actions.items())
    return ", ".join(actions)


def system_prompt(scaffold: Scaffold, actions: dict[str, str], role: Role) -> str:
    parts = [scaffold.log_prompt, scaffold.plan_prompt] if role != "game" else [scaffold.plan_prompt]
    if role != "game":
        ops = [*scaffold.operations, OpName.DONE]
        parts.append("Memory operations (one per line; PLAN allows only "
                     + ", ".join(op.value for op in READ_OPS if op in scaffold.operations) + "):\n"
                     + "\n".join(OP_SYNTAX[op] for op in ops))
    if role != "memory":
        parts.append(f"Answer with:\n{ACTION_SYNTAX}\nActions:\n{_action_lines(actions)}")
    return "\n\n".join(parts)


def file_index(scaffold: Scaffold, index: str) -> str:
    """The store's ``name (N lines)`` index with each scaffold file's purpose and policy."""
    notes = {}
    for f in scaffold.files:
        mode = {"reference": ", read-only", "synced": ", auto-updated, read-only",
                "keyed": ", one line per key: use UPSERT", "append_only": ", append-only"}.get(f.policy.mode, "")
        notes[f.name] = f" - {f.purpose}{mode}"
    return "\n".join(line + notes.get(line.split(" (")[0], "") for line in index.splitlines())


@dataclass(frozen=True)
class StepContext:
    """What one phase of one step shows the model beside the system prompt. The agent fills it
    from its store and history as the phase begins; curation fills it from the trajectory's step
    line; both then build the phase's prompt from it alone, so the two cannot drift apart."""

    step: int
    observation: str
    index: str
    """The store's raw index when the phase began (``file_index`` annotates it for the model)."""
    history: list[tuple[str, float]]
    """Every (action, reward) so far; the scaffold's ``history_length`` decides how many are shown."""
    warnings: list[str]
    phase: str
    """The phase's closing line (``LOG_PHASE``, ``plan_phase(role)``)."""


def step_message(context: StepContext, scaffold: Scaffold) -> str:
    """The per-step user message: the step, the observation, recent actions, warnings, then the
    memory index and the phase (last, since LOG's writes change the index)."""
    n = scaffold.limits.history_length
    recent = context.history[-n:] if n else []
    if context.history:
        previous = context.history[-1]
        parts = [f"Step {context.step}. Your previous action was {previous[0]} (reward {previous[1]:+g}). Now:"]
    else:
        parts = [f"Step {context.step}. Now:"]
    parts.append(context.observation)
    if recent:
        parts.append("Recent actions: " + ", ".join(f"{a} ({r:+g})" if r else a for a, r in recent))
    if context.warnings:
        parts.append("Warnings:\n" + "\n".join(f"- {w}" for w in context.warnings))
    parts += [f"Memory files:\n{file_index(scaffold, context.index)}", context.phase]
    return "\n\n".join(parts)


def phase_messages(system: str, scaffold: Scaffold, context: StepContext) -> list[dict]:
    """The opening messages of a LOG or PLAN phase. The agent builds its calls with this, and
    the curation of memory decisions rebuilds the same prompts from a trajectory with it, so
    the specialist is trained on exactly what it is shown at inference."""
    return [{"role": "system", "content": system}, {"role": "user", "content": step_message(context, scaffold)}]


def plan_phase(role: Role) -> str:
    if role == "game":
        return "Phase: PLAN. Answer with the action."
    return PLAN_PHASE.format(ending="<|DONE|> (another model picks the action)" if role == "memory" else "with the action")


def results_message(lines: list[str]) -> str:
    return "Results:\n" + "\n".join(lines) if lines else "Results: (none)"


# -- baselines (no memory) ------------------------------------------------------------------


BASELINE_ACTION = "Answer with the action."
BASELINE_COT = "Think it through in one short line, then answer with the action on the next line."


def baseline_goal(family: str) -> str:
    """What a game family is about, from its environment record (a memory agent reads its scaffold instead)."""
    from automem_dagster.games.plugin import environment  # late: the registry imports the game plugins

    return environment(family).goal


def baseline_system_prompt(family: str, actions: dict[str, str], reasoning_chars: int | None = None) -> str:
    """The system prompt of a baseline: the game's goal, the answer syntax, the actions.

    With ``reasoning_chars`` (chain of thought) the answer is one bounded line of reasoning, then the action."""
    answer = ACTION_SYNTAX
    if reasoning_chars is not None:
        answer = f"one line of reasoning (at most {reasoning_chars} characters), then on the next line:\n{ACTION_SYNTAX}"
    return f"{baseline_goal(family)}\n\nAnswer with:\n{answer}\nActions:\n{_action_lines(actions)}"


def baseline_step_message(step: int, observation: str, reward: float = 0.0) -> str:
    """One step as a baseline's history shows it; ``reward`` is what the previous action earned."""
    header = f"Step {step}:" + (f" (your previous action earned {reward:+g})" if reward else "")
    return f"{header}\n{observation}"


# -- memory baselines (rag, summary) --------------------------------------------------------

RAG_HEADER = "Earlier steps of this episode most like the current one, retrieved from memory:"
SUMMARY_HEADER = "Your summary of the episode so far:"


def summary_system_prompt(family: str, max_chars: int) -> str:
    """The system prompt of the summary baseline's rewrite call: it keeps notes, it does not act."""
    return (f"{baseline_goal(family)}\n\nYou keep a running summary of this episode for yourself: what you "
            "found where, what worked, what failed, what to do next. Rewrite it from the old summary and the "
            f"steps since, in one paragraph of at most {max_chars} characters. Answer with the summary only.")


def summary_request(summary: str, steps: list[str]) -> str:
    """The rewrite call's user message: the old summary, then the steps since it was written."""
    old = summary or "(none yet: this is the first summary)"
    return f"Old summary:\n{old}\n\nSteps since:\n" + "\n\n".join(steps) + "\n\nWrite the new summary."
