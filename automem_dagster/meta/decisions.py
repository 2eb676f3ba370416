"""Memory decisions cut out of trajectories, each scored by what followed it.

A memory decision is one LOG phase (its turns up to ``<|DONE|>``) or the consultation part of
one PLAN phase (its reads, the game action replaced by ``<|DONE|>``, since in the two-model
agent the specialist only consults and the game model acts). Each turn of a decision becomes
one prompt/completion example, the prompt rebuilt with the same ``prompts.phase_messages``
the agent uses, in the specialist's role, so training sees what inference shows.

The score guards against reward hacking: outcomes are measured over the next ``horizon``
steps (not the immediate reward), and a decision earns them only when its effect reached the
game: a write whose content a later PLAN read showed, or a read that returned something. A
write that is never read earns nothing, whatever happened afterwards. Redundant writes,
empty searches, failed operations and malformed turns cost points.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from automem_dagster.agent import prompts
from automem_dagster.memory.ops import OpName, parse_ops
from automem_dagster.rollout.trajectory import TrajectoryError, read_trajectory
from automem_dagster.scaffold import Scaffold, content_hash

WRITE_OPS = frozenset({OpName.APPEND, OpName.WRITE, OpName.UPSERT})
CONTENT_READS = frozenset({OpName.READ, OpName.TAIL, OpName.SEARCH})
"""Reads whose result shows file lines, so written content can be recognised in them."""

_ACTION = re.compile(r"<\|ACTION\|>.*?(?:<\|END\|>|$)", re.DOTALL)
DONE = "<|DONE|>"


class ScoreWeights(BaseModel):
    """How a decision is scored: outcome over ``horizon`` steps minus penalties."""

    model_config = ConfigDict(extra="forbid")

    horizon: int = Field(50, ge=1, description="K: steps after the decision whose outcome it is credited with")
    reward_weight: float = Field(1.0, ge=0.0, description="points per unit of game reward (progression counts in percent)")
    redundant_penalty: float = Field(1.0, ge=0.0)
    empty_penalty: float = Field(1.0, ge=0.0)
    failed_penalty: float = Field(1.0, ge=0.0)
    malformed_penalty: float = Field(2.0, ge=0.0)


@dataclass
class MemoryDecisionScore:
    progression_delta: float
    """Percentage points of progression gained from before the decision to the window's end."""
    reward: float
    window: int
    writes: int = 0
    writes_read: int = 0
    """Writes whose content some later read showed."""
    writes_used: int = 0
    """Writes whose content a later PLAN read showed, right before an action was chosen."""
    reads: int = 0
    reads_with_content: int = 0
    redundant: int = 0
    empty: int = 0
    failed: int = 0
    malformed: int = 0
    credited: bool = False
    score: float = 0.0


@dataclass
class MemoryDecision:
    episode: str
    seed: int
    step: int
    phase: str
    examples: list[dict]
    """``{"turn": k, "prompt": [messages], "completion": [assistant message]}`` per turn."""
    ops: list[str]
    errors: list[str]
    score: MemoryDecisionScore
    verdict: str = ""
    """Set by curation: accepted, reviewed_kept, reviewed_dropped, rejected, duplicate, ..."""
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.episode}/step{self.step}/{self.phase}"

    def record(self) -> dict:
        """The decision as curation's audit file keeps it (the examples are in the dataset)."""
        out = asdict(self)
        out.pop("examples")
        out["id"] = self.id
        out["completions"] = [e["completion"][0]["content"] for e in self.examples]
        return out


class MemoryDecisionError(ValueError):
    """A trajectory that cannot yield memory decisions; the message names it and what to do."""


def extract_decisions(path: Path, scaffold: Scaffold, weights: ScoreWeights | None = None) -> list[MemoryDecision]:
    """Every LOG and PLAN decision of one finished memory-agent episode, scored."""
    weights = weights or ScoreWeights()
    try:
        header, steps, _ = read_trajectory(path)
    except TrajectoryError as exc:
        raise MemoryDecisionError(str(exc)) from exc
    _check_header(path, header, scaffold)
    system = prompts.system_prompt(scaffold, {}, "memory")
    reads = _reads_after(steps)
    history: list[tuple[str, float]] = []
    out: list[MemoryDecision] = []
    for t, step in enumerate(steps):
        index = step.get("memory_index")
        if index is None:
            raise MemoryDecisionError(
                f"trajectory {path} step {t} has no memory_index (written by an older version of the rollout): "
                "rerun the rollout into a new batch folder to curate it"
            )
        for phase, phase_text in (("log", prompts.LOG_PHASE), ("plan", prompts.plan_phase("memory"))):
            turns = [turn for turn in step["turns"] if turn["phase"] == phase]
            if not turns:
                continue
            context = prompts.StepContext(t, step["observation"], index[phase], history, step["warnings"], phase_text)
            messages = prompts.phase_messages(system, scaffold, context)
            decision = _decision(header, t, phase, turns, messages)
            decision.score = _score(decision, steps, t, reads, weights)
            out.append(decision)
        history.append((step["action"], step["reward"]))
    return out


def _check_header(path: Path, header: dict, scaffold: Scaffold) -> None:
    if header.get("agent", "memory") != "memory":
        raise MemoryDecisionError(
            f"trajectory {path} was played by the {header['agent']!r} baseline, which makes no memory decisions")
    played = header.get("scaffold", {})
    if played.get("hash") != content_hash(scaffold):
        raise MemoryDecisionError(
            f"trajectory {path} was played with scaffold {played.get('game')} v{played.get('version')} "
            f"(hash {played.get('hash')}), not with {scaffold.game} v{scaffold.version}: curate rollouts of the "
            "scaffold the specialist will serve"
        )


def _decision(header: dict, t: int, phase: str, turns: list[dict], messages: list[dict]) -> MemoryDecision:
    messages = list(messages)
    examples, ops, errors = [], [], []
    for k, turn in enumerate(turns):
        text = turn["text"] if phase == "log" else _without_action(turn["text"])
        examples.append({"turn": k, "prompt": list(messages), "completion": [{"role": "assistant", "content": text}]})
        ops += [r["op"] for r in turn["ops"]]
        errors += turn["errors"]
        results = [f"{r['op']} -> {r['result']}" for r in turn["ops"]]
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": prompts.results_message(results)}]
    return MemoryDecision(header["episode"], int(header["seed"]), t, phase, examples, ops, errors,
                          MemoryDecisionScore(0.0, 0.0, 0))


def _without_action(text: str) -> str:
    """A one-model PLAN turn as the specialist would have written it: reads kept, the action
    replaced by ``<|DONE|>`` (an action-only turn becomes ``<|DONE|>``)."""
    if "<|ACTION|>" not in text:
        return text
    rest = _ACTION.sub("", text).strip()
    return f"{rest}\n{DONE}" if rest else DONE


def _reads_after(steps: list[dict]) -> list[list[tuple[str, str]]]:
    """Per step, the (phase, result) of every content read, in order."""
    out = []
    for step in steps:
        found = []
        for turn in step["turns"]:
            for rec in turn["ops"]:
                op = _parsed(rec["op"])
                if op is not None and op.name in CONTENT_READS and rec["ok"]:
                    found.append((turn["phase"], rec["result"]))
        out.append(found)
    return out


def _parsed(text: str):
    ops = parse_ops(text).ops
    return ops[0] if ops else None


def _score(decision: MemoryDecision, steps: list[dict], t: int, reads: list[list[tuple[str, str]]],
           weights: ScoreWeights) -> MemoryDecisionScore:
    end = min(t + weights.horizon, len(steps)) - 1
    before = steps[t - 1]["progression"] if t > 0 else 0.0
    s = MemoryDecisionScore(
        progression_delta=round(100.0 * (steps[end]["progression"] - before), 4),
        reward=round(sum(step["reward"] for step in steps[t:end + 1]), 4),
        window=end - t + 1,
    )
    # Reads that happen after this decision: a LOG write can be read by the same step's PLAN.
    later = [r for r in reads[t] if r[0] == "plan"] if decision.phase == "log" else []
    later += [r for step_reads in reads[t + 1:] for r in step_reads]
    turns = [turn for turn in steps[t]["turns"] if turn["phase"] == decision.phase]
    for turn in turns:
        for rec in turn["ops"]:
            op = _parsed(rec["op"])
            if not rec["ok"] or op is None:
                s.failed += 1
                continue
            s.redundant += rec["redundant"]
            s.empty += rec["empty"]
            if op.name in WRITE_OPS:
                s.writes += 1
                content = op.args[-1].strip()
                seen = [phase for phase, result in later if content and content in result]
                s.writes_read += bool(seen)
                s.writes_used += "plan" in seen
            elif op.name is not OpName.DONE:
                s.reads += 1
                s.reads_with_content += not rec["empty"] and bool(rec["result"].strip())
    s.malformed = sum(1 for turn in turns if turn["errors"])
    s.credited = s.writes_used > 0 if s.writes else s.reads_with_content > 0
    outcome = s.progression_delta + weights.reward_weight * s.reward if s.credited else 0.0
    penalties = (weights.redundant_penalty * s.redundant + weights.empty_penalty * s.empty
                 + weights.failed_penalty * s.failed + weights.malformed_penalty * s.malformed)
    s.score = round(outcome - penalties, 4)
    return s
