"""Counterfactual credit: what one memory decision changed, measured by replaying its episode.

The cheap score (``meta/decisions.py``) reads what *followed* a decision; this module measures
what the decision *changed*. For a decision at step t of a finished episode, arms are restored to
step t (``meta/arms.py``) and played on with the same endpoints and the same request seeds
(``agent.sampling.request_seed`` depends only on the episode's seed, the step, the phase and the
turn): one **as made**, one **ablated** (the agent without the decision's call).

How far the arms play: until the decision's content was last read in the episode (the last PLAN
read that showed a line it wrote, or the read's own step; ``MemoryDecisionScore.last_read``), capped
at ``horizon`` steps. Arms whose play diverged by then play on to the cap (or the episode's end),
since a changed action's consequences come later. Arms that did not diverge stop there, and:

- if the last read lay within the cap, the decision's effect is exactly 0: its content was read and
  changed nothing;
- if the cap came first while the arms' memory differed, the decision is **unresolved at horizon
  N**: its consequence may lie beyond the replay, which is not the same as no effect.

The effect is the paired difference of the arms over what they played, in one unit (progression
points, or the game's reward where progression moves in neither the episode nor the arms; never
both), plus the errors the decision avoided (invalid or malformed turns, stuck or oscillation
warnings, deaths, health lost), each counted as ``error_weight`` of that unit. ``pairs`` pairs of
arms are played afresh and averaged. With ``again`` a third arm, as made once more, plays after the
first pair: the difference of two as-made arms is the drift that curation's credit floor is measured
from (``meta/curation_review.py``); on a server whose sampling follows the seeds it is 0.
"""

from __future__ import annotations

import asyncio
import math
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from automem_dagster.llm.session import Clients
from automem_dagster.meta.arms import Arm, ArmRun, CounterfactualError, gain, shares_seeds
from automem_dagster.meta.decisions import MemoryDecision, ScoreWeights, extract_decisions
from automem_dagster.rollout.trajectory import read_trajectory
from automem_dagster.scaffold import Scaffold

__all__ = ["CounterfactualError", "Effect", "ReplayBudget", "explain", "floor_positions", "measure", "replay_cost"]


class ReplayBudget(BaseModel):
    """How much counterfactual replay one curation may spend (``replay_cost`` prints its price)."""

    model_config = ConfigDict(extra="forbid")

    decisions: int | None = Field(None, ge=0, description="eligible decisions replayed at most, best cheap scores "
                                                          "first; None: every one (the default: only a measured "
                                                          "decision trains); 0: none")
    horizon: int = Field(32, ge=1, description="the replay's cap: most steps an arm plays from the decision's step "
                                               "(it stops sooner where the decision's content was last read)")
    pairs: int = Field(1, ge=1, description="pairs of arms (as made, ablated) per decision, each played afresh")
    floor_pairs: int = Field(3, ge=0, description="A/A pairs (as made against as made, same seeds) whose largest "
                                                  "difference is the credit floor an effect must clear; 0: floor 0, "
                                                  "unmeasured")
    error_weight: float = Field(1.0, ge=0.0, description="what one avoided error counts, in the effect's unit")


@dataclass
class Effect:
    """A replayed decision's effect: the mean over its pairs of (made - ablated) gain plus errors avoided."""

    effect: float
    unit: str
    window: int
    """Steps the arms played (the longest arm)."""
    gain: float
    errors_avoided: float
    differ: bool
    """Whether the arms' actions differed in any pair; when not, ``effect`` is exactly 0."""
    unresolved: bool = False
    """The arms' memory differed, their play did not diverge, and the cap came before the content's last read."""
    horizon: int = 0
    """The cap the arms played under."""
    last_read: int | None = None
    drift: float | None = None
    """|made - again| in the effect's unit, where an A/A arm was played (the floor's measure)."""
    model_calls: int = 0
    arms: list[dict] = field(default_factory=list)

    def record(self) -> dict:
        return asdict(self)


def replay_cost(decisions: list[MemoryDecision], budget: ReplayBudget) -> dict:
    """What replaying ``decisions`` costs at most: steps played with the model (each arm to the cap or the
    episode's end), an estimate of its calls (the episodes' recorded turns per step) and the steps
    restored without any model call. Arms that do not diverge stop sooner, so the real cost is lower."""
    played, calls, restored = 0, 0.0, 0
    floor_at = floor_positions(len(decisions), budget.floor_pairs)
    for number, d in enumerate(decisions):
        arms = budget.pairs * 2 + (number in floor_at)
        length, per_step = _episode(d.trajectory)
        steps = arms * min(budget.horizon, length - d.step)
        played, calls, restored = played + steps, calls + steps * per_step, restored + d.step * arms
    return {"decisions": len(decisions), "horizon": budget.horizon, "pairs": budget.pairs,
            "floor_pairs": min(budget.floor_pairs, len(decisions)), "steps_played": played,
            "model_calls_estimate": round(calls), "steps_restored_without_model": restored}


def floor_positions(n: int, pairs: int) -> set[int]:
    """Which of ``n`` replayed decisions also play an A/A arm: ``pairs`` of them spread evenly over the replay
    order, so the floor sees decisions with high and low cheap scores, early and late in their episodes."""
    k = min(n, pairs)
    return {math.floor(i * n / k) for i in range(k)} if k else set()


def _episode(trajectory: str) -> tuple[int, float]:
    """An episode's length and its recorded turns per step."""
    _, steps, _ = read_trajectory(Path(trajectory))
    return len(steps), sum(len(s["turns"]) for s in steps) / max(1, len(steps))


def reach(decision: MemoryDecision, budget: ReplayBudget) -> int:
    """Steps the arms play before their divergence is judged: to the content's last read, within the cap."""
    last = decision.score.last_read
    return budget.horizon if last is None else max(1, min(budget.horizon, last - decision.step + 1))


async def measure(decision: MemoryDecision, scaffold: Scaffold, clients: Clients, budget: ReplayBudget,
                  again: bool = False) -> Effect:
    """Play ``budget.pairs`` pairs of arms for ``decision`` (with ``again``, an A/A arm for the first
    pair, after it) and return its effect (see the module doc)."""
    pairs: list[list[Arm]] = []
    for number in range(budget.pairs):
        pairs.append(await _play_pair(decision, scaffold, clients, budget, again and number == 0))
    moved = any(s["progression"] != s["progression_before"] for arms in pairs for arm in arms for s in arm.steps)
    unit = "progression" if moved or decision.score.unit == "progression" else "reward"
    for arms in pairs:
        for arm in arms:
            arm.gain = gain(arm.steps, unit)
    differ = any(_diverged(arms[0], arms[1]) for arms in pairs)
    w = budget.error_weight
    gained = sum(arms[0].gain - arms[1].gain for arms in pairs) / len(pairs)
    avoided = sum(arms[1].errors - arms[0].errors for arms in pairs) / len(pairs)
    window = max(len(arms[1].steps) for arms in pairs)
    memory_differed = any(m["memory"] != a["memory"]
                          for arms in pairs for m, a in zip(arms[0].steps, arms[1].steps, strict=False))
    last = decision.score.last_read
    capped = window >= budget.horizon and (last is None or last - decision.step + 1 > budget.horizon)
    unresolved = not differ and memory_differed and capped and not any(s["done"] for s in pairs[0][1].steps)
    drift = round(abs(pairs[0][0].value(w) - pairs[0][2].value(w)), 4) if len(pairs[0]) == 3 else None
    return Effect(round(gained + w * avoided, 4) if differ else 0.0, unit, window,
                  round(gained, 4) if differ else 0.0, round(avoided, 4) if differ else 0.0, differ, unresolved,
                  budget.horizon, last, drift,
                  sum(arm.calls for arms in pairs for arm in arms),
                  [{arm.kind: asdict(arm) for arm in arms} for arms in pairs])


async def _play_pair(decision: MemoryDecision, scaffold: Scaffold, clients: Clients, budget: ReplayBudget,
                     again: bool) -> list[Arm]:
    """The made and ablated arms, played at once (under the same load, on the server's slots): to the
    content's last read, then on to the cap where their actions differ by then. With ``again`` the made arm
    plays to the cap, and an A/A arm as made after it (a rerun, as a second replay would be): the floor is
    the drift over the longest window."""
    async with AsyncExitStack() as stack:
        runs = [await stack.enter_async_context(ArmRun(decision, scaffold, clients, kind)) for kind in ("made", "ablated")]
        first = reach(decision, budget)
        await asyncio.gather(*(run.advance(first) for run in runs))
        diverged = _diverged(runs[0].arm(), runs[1].arm())
        await asyncio.gather(*(run.advance(budget.horizon - first) for run in runs
                               if diverged or (again and run.kind == "made")))
        arms = [run.arm() for run in runs]
    if again:
        async with ArmRun(decision, scaffold, clients, "again") as run:
            await run.advance(budget.horizon)
            arms.append(run.arm())
    if not shares_seeds(decision, arms):
        raise CounterfactualError(f"{decision.id}: the arms did not share the episode's sampling seeds, so their "
                                  "difference would mix the decision's effect with sampling noise")
    return arms


def _diverged(made: Arm, ablated: Arm) -> bool:
    """Whether two arms' actions differ over the steps both played."""
    n = min(len(made.steps), len(ablated.steps))
    return made.actions[:n] != ablated.actions[:n]


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
