"""What one agent step leaves in the trajectory: its turns (one model call each, with what its memory
operations did and what it cost) and the step's outcome; and the game action read from a turn. The
memory agent and the baselines (``baselines.py``, ``rag_agent.py``, ``summary_agent.py``) all record
steps in these shapes, which curation and the summaries read back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property

from automem_dagster.games.base import ParsedAction
from automem_dagster.llm.client import Completion
from automem_dagster.memory import parse_ops


@dataclass
class OpRecord:
    op: str
    ok: bool
    result: str
    redundant: bool = False
    empty: bool = False
    changed: bool = False


@dataclass
class TurnRecord:
    """One model call: what it said, what its operations did, and what it cost."""

    phase: str
    endpoint: str
    text: str
    ops: list[OpRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 1
    finish_reason: str | None = None
    cached_tokens: int | None = None
    """Input tokens the server took from its prompt cache, as it reported them (None: it did not say)."""
    retries: dict[str, int] = field(default_factory=dict)
    retry_s: float = 0.0
    """The failed attempts before the answer by cause, and the time they cost beside ``latency_s``."""

    @classmethod
    def from_completion(cls, phase: str, endpoint: str, comp: Completion) -> TurnRecord:
        turn = cls(phase, endpoint, comp.text, input_tokens=comp.input_tokens, output_tokens=comp.output_tokens,
                   latency_s=comp.latency_s, attempts=comp.attempts, finish_reason=comp.finish_reason,
                   cached_tokens=comp.cached_tokens, retries=comp.retries, retry_s=comp.retry_s)
        if comp.finish_reason == "length":
            turn.errors.append(f"the reply was cut off at max_tokens after {comp.output_tokens} tokens")
        return turn


@dataclass
class StepOutcome:
    """The outcome of one agent step: the action to take and the full record of how."""

    action: str
    valid: bool
    note: str
    turns: list[TurnRecord]
    warnings: list[str]
    memory_index: dict[str, str] = field(default_factory=dict)
    """The store's index as each phase (``log``, ``plan``) saw it: with the trajectory's
    observation, history and warnings it rebuilds the phase's prompt exactly (curation)."""
    memory_context: dict = field(default_factory=dict)
    """What a memory baseline put in the prompt (``rag``: the records retrieved; ``summary``: the
    running summary; the memory agent: ``reused_consultation``, the earlier consultation shown again
    without a call), recorded on the step so a reader sees it and a resume restores it."""

    @cached_property
    def turn_records(self) -> list[dict]:
        """The turns as the trajectory records them, built once: the agent decides its next steps on them
        and the runner writes them."""
        return [asdict(t) for t in self.turns]


def resolve_action(turn: TurnRecord, parse_action) -> ParsedAction:
    """The action of a turn that should hold ``<|ACTION|>a<|END|>``: taken from the token when there is
    one, else read from the whole text; ``parse_action`` falls back to the game's default with a note."""
    action = parse_ops(turn.text).action
    if action is None:
        turn.errors.append("no <|ACTION|>...<|END|> in the game model's reply; the action is read from the text")
        return parse_action(turn.text)
    return checked_action(turn, action, parse_action)


def checked_action(turn: TurnRecord, action: str, parse_action) -> ParsedAction:
    """The game action an ``<|ACTION|>`` token names; one outside the game's vocabulary (after its
    tolerant synonyms) makes the turn malformed, since a well-formed token around nonsense is no clean turn."""
    parsed = parse_action(action)
    if not parsed.valid:
        fallback = parsed.note or "the default was used"
        turn.errors.append(f"<|ACTION|>{action[:60]}<|END|> names no action of this game; {fallback}")
    return parsed
