"""Memory decisions cut out of trajectories, each scored by a cheap advantage.

A memory decision is one LOG phase (its turns up to ``<|DONE|>``) or the consultation part of
one PLAN phase (its reads, the game action replaced by ``<|DONE|>``, since in the two-model
agent the specialist only consults and the game model acts). Each turn of a decision becomes
one prompt/completion example, the prompt rebuilt with the same ``prompts.phase_messages``
the agent uses, in the specialist's role, so training sees what inference shows.

The score is a cheap stand-in for the causal effect (the episode replayed with and without the
decision, ``meta/counterfactual.py``): curation only orders the replay by it and never trains on it
unless a person opts in (``meta/curate.py``). Over the score window of ``horizon`` steps from the
decision on (fewer where the episode ends first), it is what the window gained beyond the
episode's own pace (the episode's per-step return times the window's length), in one unit:
progression points, or the game's reward where progression never moved. A constant time penalty
therefore cancels out.

A decision earns that advantage only when its effect reached the game: a write that a later PLAN
read showed as a line of the file it wrote, at any distance (a note read 40 steps on counts, and
the step of its last such read is kept, ``last_read``: the counterfactual replay plays that far),
or (for a decision that wrote nothing) a READ, TAIL or SEARCH that showed at least one line. An
empty file's "(0 lines)", a search that matched nothing, CREATE and COUNT show no line and credit
nothing. Only a credited, well-formed decision is eligible: replayed, and so possibly in a dataset.
Redundant writes, empty reads, failed operations and malformed turns cost points.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from automem_dagster.agent import prompts
from automem_dagster.memory.ops import OpName, parse_ops
from automem_dagster.meta.fate import Fate, Fated
from automem_dagster.rollout.trajectory import TrajectoryError, read_trajectory
from automem_dagster.scaffold import Scaffold, content_hash

WRITE_OPS = frozenset({OpName.APPEND, OpName.WRITE, OpName.UPSERT})
CONTENT_READS = frozenset({OpName.READ, OpName.TAIL, OpName.SEARCH})
"""Reads whose result shows file lines, so written content can be recognised in them."""

_ACTION = re.compile(r"<\|ACTION\|>.*?(?:<\|END\|>|$)", re.DOTALL)
DONE = "<|DONE|>"


class ScoreWeights(BaseModel):
    """How a decision is scored: its window's advantage over ``horizon`` steps minus penalties."""

    model_config = ConfigDict(extra="forbid")

    horizon: int = Field(50, ge=1, description="the score window: steps from the decision on whose advantage the "
                                               "cheap score credits it with (not the replay's horizon)")
    redundant_penalty: float = Field(1.0, ge=0.0)
    empty_penalty: float = Field(1.0, ge=0.0)
    failed_penalty: float = Field(1.0, ge=0.0)
    malformed_penalty: float = Field(2.0, ge=0.0)


@dataclass
class MemoryDecisionScore:
    unit: str
    """``progression`` (percentage points) where the episode's progression moved, else ``reward``."""
    window: int
    """Steps from the decision's own step on that its window covers (``horizon`` when full)."""
    full_window: bool = False
    window_return: float = 0.0
    """What the window's steps gained, in ``unit``."""
    baseline: float = 0.0
    """What ``window`` steps gain at the episode's own pace: its total over its length, times ``window``."""
    advantage: float = 0.0
    """``window_return - baseline``: what the window gained beyond the episode's pace."""
    writes: int = 0
    writes_used: int = 0
    """Writes that a later PLAN read (at any distance) showed as a line of the file they wrote."""
    reads: int = 0
    reads_with_content: int = 0
    """READ, TAIL or SEARCH results that showed at least one line of the file."""
    redundant: int = 0
    empty: int = 0
    failed: int = 0
    malformed: int = 0
    credited: bool = False
    """The decision's effect reached the game: a write used (when it wrote) or a read with content."""
    last_read: int | None = None
    """The last step whose PLAN showed the decision's content: its last later read that showed a line it
    wrote, or its own step for a read; None when uncredited."""
    score: float = 0.0
    """``advantage`` minus penalties when credited; minus penalties alone otherwise."""

    @property
    def eligible(self) -> bool:
        """Only a credited, well-formed decision is replayed, and so may enter a dataset."""
        return self.credited and not self.malformed


def cheap_fate(score: MemoryDecisionScore, accept_score: float, review_floor: float) -> Fated:
    """A decision's fate by its cheap ``score`` alone (curation's first stage): what the replay then replaces
    for an eligible decision, and what an unmeasured one kept by opt-in takes."""
    if score.malformed:
        return Fated(Fate.REJECTED, "a turn of this decision was malformed")
    if not score.credited:
        return Fated(Fate.INELIGIBLE, "uncredited: no write shown by a later PLAN read, no read that showed a line")
    if score.score >= accept_score:
        return Fated(Fate.ACCEPTED, f"score {score.score:g} >= {accept_score:g}")
    if score.score >= review_floor:
        return Fated(Fate.BORDERLINE, "between review_floor and accept_score")
    return Fated(Fate.REJECTED, f"score {score.score:g} < {review_floor:g}")


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
    fate: Fate | None = None
    """Set by curation (``meta/fate.py``): accepted, reviewed_kept, reviewed_dropped, rejected, duplicate, ..."""
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    trajectory: str = ""
    """The finished trajectory the decision was cut from (what a counterfactual replay restores)."""
    replayed: dict | None = None
    """Set by curation for a replayed decision: its ``counterfactual.Effect`` record (both arms)."""
    cheap_fate: Fate | None = None
    """What the cheap score alone would have decided (``accepted``, ``borderline``, ``rejected``), kept
    for the calibration of the cheap score against replayed effects."""

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
            decision.trajectory = str(path)
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
                          MemoryDecisionScore("", 0))


def _without_action(text: str) -> str:
    """A one-model PLAN turn as the specialist would have written it: reads kept, the action
    replaced by ``<|DONE|>`` (an action-only turn becomes ``<|DONE|>``)."""
    if "<|ACTION|>" not in text:
        return text
    rest = _ACTION.sub("", text).strip()
    return f"{rest}\n{DONE}" if rest else DONE


def _reads_after(steps: list[dict]) -> list[list[tuple[str, str, list[str]]]]:
    """Per step, the (phase, file, lines shown) of every successful content read, in order."""
    out = []
    for step in steps:
        found = []
        for turn in step["turns"]:
            for rec in turn["ops"]:
                op = _parsed(rec["op"])
                if op is not None and op.name in CONTENT_READS and rec["ok"]:
                    found.append((turn["phase"], op.file, shown_lines(rec)))
        out.append(found)
    return out


def shown_lines(rec: dict) -> list[str]:
    """The file lines a READ, TAIL or SEARCH result showed: every line after the result's header,
    none for an empty file ("f is empty (0 lines)") or a search that matched nothing."""
    if rec["empty"]:
        return []
    return [line.strip() for line in rec["result"].split("\n")[1:] if line.strip()]


def written_line(op) -> str:
    """The line a write puts in its file, as the store writes it (UPSERT: ``key: text``)."""
    if op.name is OpName.UPSERT:
        return f"{op.args[0]}: {op.args[1]}"
    return op.args[-1]


def _parsed(text: str):
    ops = parse_ops(text).ops
    return ops[0] if ops else None


def step_gains(steps: list[dict]) -> tuple[str, list[float]]:
    """Each step's gain in one unit: progression points where the episode's progression ever moved,
    else the game's reward (never both: in Crafter an achievement is both a progression step and a
    reward of 1, and adding them would count it twice)."""
    progression = [100.0 * step["progression"] for step in steps]
    gains = [p - (progression[i - 1] if i else 0.0) for i, p in enumerate(progression)]
    if any(abs(g) > 1e-12 for g in gains):
        return "progression", gains
    return "reward", [float(step["reward"]) for step in steps]


def _score(decision: MemoryDecision, steps: list[dict], t: int, reads: list[list[tuple[str, str, list[str]]]],
           weights: ScoreWeights) -> MemoryDecisionScore:
    unit, gains = step_gains(steps)
    end = min(t + weights.horizon, len(steps))
    window = end - t
    s = MemoryDecisionScore(unit=unit, window=window, full_window=window == weights.horizon)
    s.window_return = round(sum(gains[t:end]), 4)
    s.baseline = round(sum(gains) / len(gains) * window, 4)
    s.advantage = round(s.window_return - s.baseline, 4)
    # Later PLAN reads, at any distance: a LOG write can be read by the same step's PLAN.
    start = t + (decision.phase == "plan")
    plan_reads = [(start + i, file, lines) for i, step_reads in enumerate(reads[start:])
                  for phase, file, lines in step_reads if phase == "plan"]
    shown_at: list[int] = []
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
                line = written_line(op).strip()
                seen = [at for at, file, lines in plan_reads if file == op.file and line in lines]
                s.writes_used += bool(seen)
                shown_at += seen
            elif op.name in CONTENT_READS:
                s.reads += 1
                s.reads_with_content += bool(shown_lines(rec))
    s.malformed = sum(1 for turn in turns if turn["errors"])
    s.credited = s.writes_used > 0 if s.writes else s.reads_with_content > 0
    if s.credited:
        s.last_read = max(shown_at) if s.writes else t
    penalties = (weights.redundant_penalty * s.redundant + weights.empty_penalty * s.empty
                 + weights.failed_penalty * s.failed + weights.malformed_penalty * s.malformed)
    s.score = round((s.advantage if s.credited else 0.0) - penalties, 4)
    return s
