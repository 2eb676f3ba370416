"""One arm of a counterfactual replay: a decision's episode restored to its step, then played on.

An arm restores the finished episode to the decision's step exactly as a resume does
(``rollout/resume.py``: the game reset to the episode's seed, the recorded actions replayed, the
journal's operations re-executed, every step checked against the record, no model asked) and then
plays on, a few steps at a time (``ArmRun.advance``), so that the replay (``meta/counterfactual.py``)
can stop its arms once they have shown what they will show. Its kind says what the decision is:

- ``made`` (and ``again``, a second arm as made, for the floor): the decision's turns as recorded;
- ``ablated``: the agent without the decision's call. A LOG, or a two-model PLAN consultation,
  answers ``<|DONE|>`` (nothing written, nothing read); a one-model PLAN goes straight to its
  action with no consultation at all (one action-only turn, as when the agent has nothing to read),
  so no empty result stands in for memory and no consultation is left to be reused later.

Every request an arm sends carries the seed the episode's schedule gives its step, phase and turn
(``agent.sampling.request_seed``); each arm records them per step, and the replay checks that the
arms of a pair drew from that one schedule (``shares_seeds``).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from automem_dagster.agent import MemoryAgent, prompts
from automem_dagster.agent.sampling import request_seed
from automem_dagster.games import env_ref, make_game
from automem_dagster.games.base import StepResult
from automem_dagster.llm.client import Completion
from automem_dagster.llm.session import Clients
from automem_dagster.memory import Journal, MemoryStore
from automem_dagster.memory.journal import JOURNAL_FILE, read_journal
from automem_dagster.meta.decisions import DONE, MemoryDecision
from automem_dagster.rollout.resume import Interrupted, Play, ResumeMismatch, replay
from automem_dagster.rollout.trajectory import read_manifest, read_trajectory
from automem_dagster.scaffold import Scaffold

HEALTH_KEYS = ("health", "hp")
"""The vitals a game reports health under (Crafter ``health``, NetHack ``hp``)."""
PHASES = ("log", "plan", "action")
MAX_TURNS = 16
"""More turns than any phase of one step takes: the seeds of a step's schedule (``shares_seeds``)."""


class CounterfactualError(RuntimeError):
    """A decision that cannot be replayed; the message names it and what to do."""


@dataclass
class Arm:
    """One arm: what it did, step by step, what it gained and cost, the seeds it sent and its model calls."""

    kind: str
    """``made``, ``ablated`` or ``again`` (as made, a second time: the floor's A/A arm)."""
    steps: list[dict]
    gain: float
    errors: int
    seeds: list[list[int | None]] = field(default_factory=list)
    """Per played step, the sampling seed of every request the arm sent (injected turns included)."""
    calls: int = 0
    """Requests that reached a model (the decision's injected turns are not asked)."""

    @property
    def actions(self) -> list[str]:
        return [s["action"] for s in self.steps]

    def value(self, error_weight: float) -> float:
        """What the arm gained less its errors, in the effect's unit: the difference of two arms' values is an effect."""
        return self.gain - error_weight * self.errors


def shares_seeds(decision: MemoryDecision, arms: list[Arm]) -> bool:
    """Whether every request of every arm took its seed from the episode's schedule for the step it was
    played at, so the arms of a pair met the same sampling at the same point (common random numbers)."""
    for arm in arms:
        for step, seeds in zip((s["step"] for s in arm.steps), arm.seeds, strict=True):
            allowed = {request_seed(decision.seed, step, phase, k) for phase in PHASES for k in range(MAX_TURNS)}
            if any(seed not in allowed for seed in seeds):
                return False
    return True


class ArmRun:
    """One arm, restored on entry (``async with``) and played on by ``advance``; ``arm()`` is what it did."""

    def __init__(self, decision: MemoryDecision, scaffold: Scaffold, clients: Clients, kind: str):
        self.decision, self.scaffold, self.clients, self.kind = decision, scaffold, clients, kind
        self.steps: list[dict] = []
        self.seeds: list[list[int | None]] = []

    async def __aenter__(self) -> ArmRun:
        d = self.decision
        path = Path(d.trajectory)
        header, steps, _ = read_trajectory(path)
        batch = path.parent.parent
        self.two_model = bool(read_manifest(batch).get("two_model"))
        if not env_ref(header["game"]).plugin.replays_exactly:
            raise CounterfactualError(f"{d.id}: {header['game']} does not replay exactly (its plugin says so), "
                                      "so its episodes cannot be restored to a step")
        if self.two_model and self.clients.memory is None:
            raise CounterfactualError(f"{d.id} was played by two models: replaying it needs the memory endpoint")
        journal = _journal(batch / "memory" / header["episode"] / JOURNAL_FILE)
        self.game = make_game(header["game"], header["max_steps"])
        self.tmp = tempfile.TemporaryDirectory(prefix="automem-arm-")
        try:
            start = self.game.reset(int(header["seed"]))  # first: a suite's actions are those of the seed's task
            agent = self._agent(steps[d.step], Path(self.tmp.name))
            self.play = Play(agent, agent.store, start)
            await replay(self.play, Interrupted(header, steps[:d.step], journal), self._game_step)
        except ResumeMismatch as exc:
            await self.__aexit__(None, None, None)
            raise CounterfactualError(f"{d.id} cannot be restored to its step: {exc}") from exc
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        self.game.close()
        self.tmp.cleanup()

    async def _game_step(self, action: str) -> StepResult:
        return self.game.step(action)

    @property
    def ended(self) -> bool:
        return self.play.result.done

    async def advance(self, steps: int) -> None:
        """Play ``steps`` more steps (fewer when the episode ends), recording what a side-by-side view needs."""
        play, clients = self.play, self._recorders
        for _ in range(steps):
            if play.result.done:
                return
            shown, before, sent = play.shown(), play.result, [len(c.seeds) for c in clients]
            play.begin_step()
            outcome = await play.agent.step(play.step, shown)
            result = await self._game_step(outcome.action)
            turns = outcome.turn_records
            self.seeds.append([s for c, n in zip(clients, sent, strict=True) for s in c.seeds[n:]])
            self.steps.append({
                "step": play.step, "action": outcome.action, "valid": outcome.valid,
                "reward": result.reward, "progression": result.progression, "progression_before": before.progression,
                "done": result.done, "warnings": outcome.warnings,
                "memory": [f"{t['phase']}: {r['op']} -> {r['result'][:80]}" for t in turns for r in t["ops"]],
                "errors": _errors(outcome, turns, before, result),
            })
            play.end_step(outcome.action, outcome.valid, outcome.note, result)

    def arm(self) -> Arm:
        calls = sum(c.calls for c in self._recorders)
        return Arm(self.kind, self.steps, 0.0, sum(s["errors"] for s in self.steps), self.seeds, calls)

    def _agent(self, record: dict, tmp: Path) -> ArmAgent:
        """The episode's agent for this arm: the client serving the decision's phase answers its turns as the
        arm has them (``Injected``), every other request goes to the endpoints as played."""
        d, made = self.decision, self.kind != "ablated"
        turns = [turn for turn in record["turns"] if turn["phase"] == d.phase]
        replies = {}
        for k, turn in enumerate(turns):
            if d.phase == "log" or turn["ops"]:
                seed = request_seed(d.seed, d.step, d.phase, k)
                if made:
                    replies[seed] = turn["text"]
                elif d.phase == "log" or self.two_model:
                    replies[seed] = DONE
        memory = self.clients.memory if self.two_model else None
        game = Injected(self.clients.game, {} if memory is not None else replies)
        memory = Injected(memory, replies) if memory is not None else None
        self._recorders = [c for c in (game, memory) if c is not None]
        store = MemoryStore(tmp / "files", journal=Journal())
        without = d.step if not made and d.phase == "plan" and not self.two_model else None
        return ArmAgent(self.scaffold, store, self.game.actions(), self.game.parse_action, game, memory,
                        episode_seed=d.seed, without_consultation_at=without)


def _journal(path: Path) -> dict[int | None, list[dict]]:
    journal: dict[int | None, list[dict]] = {}
    try:
        for entry in read_journal(path):
            journal.setdefault(entry.get("step"), []).append(entry)
    except (OSError, ValueError) as exc:
        raise CounterfactualError(f"the memory journal {path} cannot be read ({exc}); only a memory-agent "
                                  "batch with its memory folder can be replayed") from exc
    return journal


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


def gain(steps: list[dict], unit: str) -> float:
    """What an arm's steps gained in ``unit``: progression points from its first step on, or the rewards' sum."""
    if not steps:
        return 0.0
    if unit == "progression":
        return round(100.0 * (steps[-1]["progression"] - steps[0]["progression_before"]), 4)
    return round(sum(float(s["reward"]) for s in steps), 4)


class Injected:
    """A client that answers the requests of the given seeds with the given texts (the decision's turns
    as the arm has them), passes every other request to ``client`` (a model's client, or the rule actor,
    whose ``complete`` takes the grammar and keywords only), and records every request's seed and the
    calls that reached the model."""

    def __init__(self, client, replies: dict[int, str]):
        self.client, self.replies, self.config = client, replies, client.config
        self.seeds: list[int | None] = []
        self.calls = 0

    async def complete(self, messages: list[dict], grammar: str | None = None, json_schema: dict | None = None,
                       **kwargs) -> Completion:
        seed = kwargs.get("seed")
        self.seeds.append(seed)
        text = self.replies.get(seed)
        if text is None:
            self.calls += 1
            return await self.client.complete(messages, grammar, json_schema=json_schema, **kwargs)
        if json_schema is not None:
            raise CounterfactualError(f"endpoint {self.config.name!r} takes JSON-schema turns: a decision can be "
                                      "replayed only on an endpoint whose turns are in the token syntax")
        return Completion(text, 0, 0, 0.0, 1, "stop")

    def __getattr__(self, name: str):
        return getattr(self.client, name)


class ArmAgent(MemoryAgent):
    """The memory agent of one arm: at step ``without_consultation_at`` (a one-model PLAN ablated) it acts
    without consulting memory; everywhere else it is the agent that played the episode."""

    def __init__(self, *args, without_consultation_at: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.without_consultation_at = without_consultation_at

    async def _plan_phase(self, step: int, observation: str, warnings: list[str], reuse=None):
        if step != self.without_consultation_at:
            return await super()._plan_phase(step, observation, warnings, reuse)
        messages = self._messages(self._system, step, observation, warnings, prompts.plan_phase(self._role))
        return await self._act_only(step, messages, "plan", "a turn without consultation")
