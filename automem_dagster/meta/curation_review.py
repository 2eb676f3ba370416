"""The measured review of a curation: every eligible decision replayed, judged against a credit floor.

Only what was measured trains. Every eligible decision (credited and well formed,
``meta/decisions.py``) is replayed with and without it (``meta/counterfactual.py``), best cheap
scores first (the cheap score only orders the replay), up to ``ReplayBudget.decisions`` (None:
all). ``floor_pairs`` replayed decisions, spread over that order, also play an A/A arm, as made against as made
with the same seeds and nothing removed; the largest difference of those pairs is the **credit
floor**, how far two arms drift when nothing was changed (0 on a server whose sampling follows the
seeds; above 0 where reruns differ, e.g. llama.cpp with ``cache_prompt``). The rule: a decision is
kept when its replayed effect is above the floor (effect > floor). A decision whose arms' memory
differed but whose play did not diverge within the cap is *unresolved*, and one whose play never
diverged up to its content's last read had an effect of exactly 0; neither is kept.

Eligible decisions the budget did not reach, or that could not be replayed, are *unmeasured*: none
of them trains unless the curation opts in (``keep_unmeasured``), and the card counts them. The
replay's cost is said before it starts (an estimate, ``replay_cost``) and after it ends (the model
calls it made and the seconds it took); both are kept in ``stats.json``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from automem_dagster.eta import eta
from automem_dagster.llm.session import Clients
from automem_dagster.meta.counterfactual import (
    CounterfactualError,
    ReplayBudget,
    floor_positions,
    measure,
    replay_cost,
)
from automem_dagster.meta.decisions import MemoryDecision
from automem_dagster.meta.fate import Fate, Fated
from automem_dagster.scaffold import Scaffold

Say = Callable[[str], None]


def replay_order(decisions: list[MemoryDecision], budget: ReplayBudget) -> tuple[list[MemoryDecision], int]:
    """The eligible decisions the budget replays, best cheap scores first, and how many eligible ones it leaves."""
    pool = sorted((d for d in decisions if d.score.eligible), key=lambda d: (-d.score.score, d.episode, d.step, d.phase))
    n = len(pool) if budget.decisions is None else min(budget.decisions, len(pool))
    return pool[:n], len(pool) - n


async def measured_review(decisions: list[MemoryDecision], scaffold: Scaffold, clients: Clients | None,
                          budget: ReplayBudget, say: Say) -> tuple[dict, dict[str, Fated]]:
    """Replay the eligible decisions (``replay_order``, each one's effect kept in its ``replayed``) and return
    the replay's record (floor, cost, counts) for ``stats.json`` and the new fate of every eligible decision,
    by its id: judged by its effect against the floor, or ``unmeasured``."""
    order, left = replay_order(decisions, budget) if clients is not None else ([], 0)
    why = "no endpoints were given to replay with" if clients is None else \
        f"the replay budget of {budget.decisions} decisions was spent"
    estimate = replay_cost(order, budget)
    if order:
        say(f"counterfactual replay: {estimate['decisions']} decisions x {estimate['pairs']} pair(s) of arms, "
            f"{estimate['floor_pairs']} A/A arm(s) for the floor, at most {estimate['horizon']} steps each = at most "
            f"{estimate['steps_played']} steps with the model (about {estimate['model_calls_estimate']} model calls), "
            f"{estimate['steps_restored_without_model']} steps restored without it")
    started, calls, drifts, played = time.perf_counter(), 0, [], []
    floor_at = floor_positions(len(order), budget.floor_pairs)
    for number, d in enumerate(order):
        say(f"replaying {d.id} ({number + 1}/{len(order)}), eta {eta(number, len(order), time.perf_counter() - started)}")
        try:
            effect = await measure(d, scaffold, clients, budget, again=number in floor_at)
        except CounterfactualError as exc:  # this decision stays unmeasured; the others are replayed
            say(f"{d.id} not replayed: {exc}")
            d.notes.append(f"not replayed: {exc}")
            continue
        d.replayed, calls = effect.record(), calls + effect.model_calls
        played.append(d)
        if effect.drift is not None:
            drifts.append(effect.drift)
    seconds = round(time.perf_counter() - started, 1)
    floor = max(drifts, default=0.0)
    fates = {d.id: _judge(d.replayed, floor) for d in played}
    unmeasured = [d for d in decisions if d.score.eligible and d.replayed is None]
    fates.update({d.id: Fated(Fate.UNMEASURED, "eligible but not replayed: " + (d.notes[-1] if d.notes else why))
                  for d in unmeasured})
    if order:
        say(f"replay done: {len(played)} decisions in {seconds:g} s, {calls} model calls; credit floor {floor:g} "
            f"(largest A/A difference of {len(drifts)} pair(s)); {len(unmeasured)} eligible decisions unmeasured")
    return {"floor": floor, "floor_rule": "kept when the replayed effect is above the floor (effect > floor)",
            "floor_pairs": len(drifts), "drifts": drifts, "replayed": len(played), "unmeasured": len(unmeasured),
            "left_by_budget": left, "unmeasured_why": why if unmeasured else None,
            "cost": {"estimate": estimate, "model_calls": calls, "seconds": seconds}}, fates


def _judge(e: dict, floor: float) -> Fated:
    """A replayed decision's fate by its effect record ``e`` (``counterfactual.Effect.record``) against ``floor``."""
    if e["differ"] and e["effect"] > floor:
        return Fated(Fate.ACCEPTED, f"replayed effect {e['effect']:+g} {e['unit']} > floor {floor:g}")
    if e["unresolved"]:
        return Fated(Fate.UNRESOLVED, (
            f"unresolved at horizon {e['horizon']}: the arms' memory differed but their play did not diverge within "
            f"{e['horizon']} steps (its content was last read at step {e['last_read']})"))
    if not e["differ"]:
        return Fated(Fate.REJECTED, "replayed: the arms' play never diverged up to the last read of its content: "
                                    "effect exactly 0")
    return Fated(Fate.REJECTED, f"replayed effect {e['effect']:+g} {e['unit']} <= floor {floor:g}")
