"""Counterfactual credit: what one memory decision changed, measured by replaying its episode.

The cheap score (``meta/decisions.py``) reads what *followed* a decision; this module measures
what the decision *changed*. For a decision at step t of a finished episode, the episode is
restored to step t exactly as a resume does (``rollout/resume.py``: the game reset to the
episode's seed, the recorded actions replayed, the journal's operations re-executed, every step
checked against the record, no model asked), and then two arms of K steps are played with the
same endpoints and the same request seeds (``agent.sampling.request_seed`` depends only on the
episode's seed, the step, the phase and the turn):

- **as made**: the decision's turns are given as recorded, everything else is asked afresh;
- **ablated**: the decision's turns are ``<|DONE|>`` (in a one-model PLAN, whose phase must still
  end with an action, the recorded turn is kept), its writes are not applied and its reads
  return nothing.

The effect is the paired difference of the arms over the window in one unit (progression
points, or the game's reward where progression moves in neither the episode nor the arms; never
both) plus the errors the decision avoided (invalid or malformed turns, stuck or oscillation
warnings, deaths, health lost), each counted as ``error_weight`` of that unit. Arms whose actions
never differ give an effect of exactly 0. Each pair of arms is played afresh (a rerun on llama.cpp
is not bit-identical, docs/results.md), and ``pairs`` pairs are averaged.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from automem_dagster.agent import MemoryAgent
from automem_dagster.agent.memory_agent import OpRecord
from automem_dagster.agent.sampling import request_seed
from automem_dagster.games import env_ref, make_game
from automem_dagster.games.base import StepResult
from automem_dagster.llm.client import Completion
from automem_dagster.llm.session import Clients
from automem_dagster.memory import Journal, MemoryStore, format_op
from automem_dagster.memory.journal import read_journal
from automem_dagster.meta.decisions import DONE, WRITE_OPS, MemoryDecision, ScoreWeights, extract_decisions
from automem_dagster.rollout.resume import Interrupted, Play, ResumeMismatch, replay
from automem_dagster.rollout.trajectory import read_manifest, read_trajectory
from automem_dagster.scaffold import Scaffold

HEALTH_KEYS = ("health", "hp")
"""The vitals a game reports health under (Crafter ``health``, NetHack ``hp``)."""


class ReplayBudget(BaseModel):
    """How much counterfactual replay one curation may spend (``replay_cost`` prints its price)."""

    model_config = ConfigDict(extra="forbid")

    decisions: int = Field(4, ge=0, description="eligible decisions replayed (the rest keep the cheap score); each "
                                                "costs 2 x horizon steps of model calls per pair. The default, 4, is "
                                                "a small sample, so every dataset reports the cheap score's agreement "
                                                "for 64 model-played steps; 0: none")
    horizon: int = Field(8, ge=1, description="K: steps each arm plays from the decision's step on")
    pairs: int = Field(1, ge=1, description="pairs of arms (as made, ablated) per decision, each played afresh")
    error_weight: float = Field(1.0, ge=0.0, description="what one avoided error counts, in the effect's unit")


class CounterfactualError(RuntimeError):
    """A decision that cannot be replayed; the message names it and what to do."""


@dataclass
class Arm:
    """One arm of K steps: what it did, step by step, and what it gained and cost."""

    kind: str
    """``made`` or ``ablated``."""
    steps: list[dict]
    gain: float
    errors: int

    @property
    def actions(self) -> list[str]:
        return [s["action"] for s in self.steps]


@dataclass
class Effect:
    """A replayed decision's effect: the mean over its pairs of (made - ablated) gain plus errors avoided."""

    effect: float
    unit: str
    window: int
    gain: float
    errors_avoided: float
    differ: bool
    """Whether the arms' actions differed in any pair; when not, ``effect`` is exactly 0."""
    arms: list[dict] = field(default_factory=list)

    def record(self) -> dict:
        return asdict(self)


def replay_cost(decisions: list[MemoryDecision], budget: ReplayBudget) -> dict:
    """What replaying ``decisions`` costs: steps played with the model, an estimate of its calls
    (the episodes' recorded turns per step) and the steps restored without any model call."""
    played = len(decisions) * budget.pairs * 2 * budget.horizon
    per_step = [_turns_per_step(d.trajectory) for d in decisions]
    calls = round(sum(per_step) / len(per_step) * played) if per_step else 0
    restored = sum(d.step for d in decisions) * budget.pairs * 2
    return {"decisions": len(decisions), "horizon": budget.horizon, "pairs": budget.pairs,
            "steps_played": played, "model_calls_estimate": calls, "steps_restored_without_model": restored}


def _turns_per_step(trajectory: str) -> float:
    _, steps, _ = read_trajectory(Path(trajectory))
    return sum(len(s["turns"]) for s in steps) / max(1, len(steps))


async def measure(decision: MemoryDecision, scaffold: Scaffold, clients: Clients, budget: ReplayBudget) -> Effect:
    """Play ``budget.pairs`` pairs of arms for ``decision`` and return its effect (see the module doc)."""
    pairs = []
    for _ in range(budget.pairs):  # the two arms of a pair at once: under the same load, on two server slots
        made, ablated = await asyncio.gather(play_arm(decision, scaffold, clients, budget, "made"),
                                             play_arm(decision, scaffold, clients, budget, "ablated"))
        pairs.append((made, ablated))
    moved = any(s["progression"] != s["progression_before"] for pair in pairs for arm in pair for s in arm.steps)
    unit = "progression" if moved or decision.score.unit == "progression" else "reward"
    for made, ablated in pairs:
        for arm in (made, ablated):
            arm.gain = _gain(arm.steps, unit)
    differ = any(m.actions != a.actions for m, a in pairs)
    gain = sum(m.gain - a.gain for m, a in pairs) / len(pairs)
    avoided = sum(a.errors - m.errors for m, a in pairs) / len(pairs)
    effect = round(gain + budget.error_weight * avoided, 4) if differ else 0.0
    return Effect(effect, unit, budget.horizon, round(gain, 4) if differ else 0.0,
                  round(avoided, 4) if differ else 0.0, differ,
                  [{"made": asdict(m), "ablated": asdict(a)} for m, a in pairs])


async def play_arm(decision: MemoryDecision, scaffold: Scaffold, clients: Clients, budget: ReplayBudget,
                   kind: str) -> Arm:
    """Restore the decision's episode to its step and play one arm of ``budget.horizon`` steps."""
    path = Path(decision.trajectory)
    header, steps, _ = read_trajectory(path)
    batch = path.parent.parent
    two_model = bool(read_manifest(batch).get("two_model"))
    if not env_ref(header["game"]).plugin.replays_exactly:
        raise CounterfactualError(f"{decision.id}: {header['game']} does not replay exactly (its plugin says so), "
                                  "so its episodes cannot be restored to a step")
    if two_model and clients.memory is None:
        raise CounterfactualError(f"{decision.id} was played by two models: replaying it needs the memory endpoint")
    game = make_game(header["game"], header["max_steps"])
    try:
        with tempfile.TemporaryDirectory(prefix="automem-arm-") as tmp:
            start = game.reset(int(header["seed"]))  # first: a suite's actions are those of the seed's task
            agent = _arm_agent(decision, steps[decision.step], scaffold, clients, game, Path(tmp), kind, two_model)
            play = Play(agent, agent.store, start)

            async def game_step(action: str) -> StepResult:
                return game.step(action)

            journal = _journal(batch / "memory" / header["episode"] / "journal.jsonl")
            try:
                await replay(play, Interrupted(header, steps[:decision.step], journal), game_step)
            except ResumeMismatch as exc:
                raise CounterfactualError(f"{decision.id} cannot be restored to its step: {exc}") from exc
            played = await _play(play, game_step, budget.horizon)
    finally:
        game.close()
    return Arm(kind, played, 0.0, sum(s["errors"] for s in played))


def _journal(path: Path) -> dict[int | None, list[dict]]:
    journal: dict[int | None, list[dict]] = {}
    try:
        for entry in read_journal(path):
            journal.setdefault(entry.get("step"), []).append(entry)
    except (OSError, ValueError) as exc:
        raise CounterfactualError(f"the memory journal {path} cannot be read ({exc}); only a memory-agent "
                                  "batch with its memory folder can be replayed") from exc
    return journal


def _arm_agent(decision: MemoryDecision, record: dict, scaffold: Scaffold, clients: Clients, game, tmp: Path,
               kind: str, two_model: bool) -> ArmAgent:
    """The episode's agent for one arm: the client serving the decision's phase answers its turns
    as the arm says (``Injected``), the other requests go to the endpoints as played."""
    turns = [turn for turn in record["turns"] if turn["phase"] == decision.phase]
    replies = {}
    for k, turn in enumerate(turns):
        if decision.phase == "log" or turn["ops"]:
            ablated = DONE if decision.phase == "log" or two_model else turn["text"]
            replies[request_seed(decision.seed, decision.step, decision.phase, k)] = \
                turn["text"] if kind == "made" else ablated
    memory = clients.memory if two_model else None
    game_client = clients.game if memory is not None else Injected(clients.game, replies)
    memory = Injected(memory, replies) if memory is not None else None
    store = MemoryStore(tmp / "files", journal=Journal())
    ablate_at = (decision.step, decision.phase) if kind == "ablated" else None
    return ArmAgent(scaffold, store, game.actions(), game.parse_action, game_client, memory,
                    episode_seed=decision.seed, ablate_at=ablate_at)


async def _play(play: Play, game_step, horizon: int) -> list[dict]:
    """Play ``horizon`` steps (fewer when the episode ends) and record what a side-by-side view needs."""
    out, start = [], play.step
    while play.step < start + horizon and not play.result.done:
        shown, before = play.shown(), play.result
        play.begin_step()
        outcome = await play.agent.step(play.step, shown)
        result = await game_step(outcome.action)
        turns = outcome.turn_records
        out.append({
            "step": play.step, "action": outcome.action, "valid": outcome.valid,
            "reward": result.reward, "progression": result.progression, "progression_before": before.progression,
            "done": result.done, "warnings": outcome.warnings,
            "memory": [f"{t['phase']}: {r['op']} -> {r['result'][:80]}" for t in turns for r in t["ops"]],
            "errors": _errors(outcome, turns, before, result),
        })
        play.end_step(outcome.action, outcome.valid, outcome.note, result)
    return out


def _errors(outcome, turns: list[dict], before: StepResult, after: StepResult) -> int:
    """Errors of one step: an invalid action, each malformed turn, a stuck or oscillation warning,
    a death and each point of health lost (where the game reports health)."""
    errors = (not outcome.valid) + sum(1 for t in turns if t["errors"]) + len(outcome.warnings)
    health_before, health_after = _health(before), _health(after)
    if health_before is not None and health_after is not None:
        errors += max(0, int(health_before - health_after)) + (after.done and health_after <= 0)
    return int(errors)


def _health(result: StepResult) -> float | None:
    vitals = result.state.vitals or {}
    return next((float(vitals[k]) for k in HEALTH_KEYS if k in vitals), None)


def _gain(steps: list[dict], unit: str) -> float:
    if not steps:
        return 0.0
    if unit == "progression":
        return round(100.0 * (steps[-1]["progression"] - steps[0]["progression_before"]), 4)
    return round(sum(float(s["reward"]) for s in steps), 4)


class Injected:
    """A client that answers the requests of the given seeds with the given texts (the decision's
    turns as the arm has them) and passes every other request to ``client``."""

    def __init__(self, client, replies: dict[int, str]):
        self.client, self.replies, self.config = client, replies, client.config

    async def complete(self, messages: list[dict], grammar: str | None = None, json_schema: dict | None = None,
                       **kwargs) -> Completion:
        text = self.replies.get(kwargs.get("seed"))
        if text is None:
            return await self.client.complete(messages, grammar, json_schema, **kwargs)
        if json_schema is not None:
            raise CounterfactualError(f"endpoint {self.config.name!r} takes JSON-schema turns: a decision can be "
                                      "replayed only on an endpoint whose turns are in the token syntax")
        return Completion(text, 0, 0, 0.0, 1, "stop")

    def __getattr__(self, name: str):
        return getattr(self.client, name)


class ArmAgent(MemoryAgent):
    """The memory agent of one arm: at ``ablate_at`` (step, phase) its writes are not applied and its
    reads return nothing; everywhere else it is the agent that played the episode."""

    def __init__(self, *args, ablate_at: tuple[int, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.ablate_at, self.now = ablate_at, -1

    async def step(self, step: int, observation: str):
        self.now = step
        return await super().step(step, observation)

    def _execute(self, op, phase: str) -> OpRecord:
        if (self.now, phase) != self.ablate_at:
            return super()._execute(op, phase)
        if op.name in WRITE_OPS:
            return OpRecord(format_op(op), True, f"{op.file}: not applied (ablated)")
        return OpRecord(format_op(op), True, f"{op.file}: (nothing: ablated)", empty=True)


async def explain(trajectory: Path, scaffold: Scaffold, step: int, clients: Clients, budget: ReplayBudget,
                  weights: ScoreWeights | None = None) -> list[tuple[MemoryDecision, Effect]]:
    """Every memory decision at ``step`` of the finished episode ``trajectory``, each with its replayed
    arms (``automem curate --explain``); a step without a decision is named with the steps that have one."""
    decisions = extract_decisions(Path(trajectory), scaffold, weights)
    at = [d for d in decisions if d.step == step]
    if not at:
        steps = sorted({d.step for d in decisions})
        raise CounterfactualError(f"{trajectory} has no memory decision at step {step}: decisions are at steps "
                                  f"{', '.join(map(str, steps[:30]))}{' ...' if len(steps) > 30 else ''}")
    return [(d, await measure(d, scaffold, clients, budget)) for d in at]
