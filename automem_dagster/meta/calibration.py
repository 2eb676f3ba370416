"""The replayed sample of a curation: which decisions are replayed, their verdicts, and how well the
cheap score agrees with what the replay measured.

The cheap score decides for every decision; a counterfactual replay (``meta/counterfactual.py``)
measures a sample of the eligible ones. A replayed decision's verdict follows its measured effect
(kept when it is above 0, dropped otherwise), since that is the faithful measure; the others keep
the cheap verdict. Every dataset reports the agreement on the sample: the Spearman rank correlation
of cheap score and measured effect, and the share of the decisions the cheap score accepts whose
measured effect is above 0. A low share says the cheap score's acceptances are not to be trusted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from automem_dagster.eta import eta
from automem_dagster.llm.session import Clients
from automem_dagster.meta.counterfactual import CounterfactualError, ReplayBudget, measure, replay_cost
from automem_dagster.meta.decisions import MemoryDecision
from automem_dagster.scaffold import Scaffold

Say = Callable[[str], None]


def select(decisions: list[MemoryDecision], budget: ReplayBudget) -> list[MemoryDecision]:
    """Up to ``budget.decisions`` eligible, well-formed decisions, evenly spread over the batch in the
    order (episode, step, phase), so the sample covers early and late decisions of every episode."""
    pool = sorted((d for d in decisions if d.score.eligible and not d.score.malformed),
                  key=lambda d: (d.episode, d.step, d.phase))
    n = min(budget.decisions, len(pool))
    return [pool[math.floor(i * len(pool) / n)] for i in range(n)] if n else []


async def replay_sample(decisions: list[MemoryDecision], scaffold: Scaffold, clients: Clients,
                        budget: ReplayBudget, say: Say) -> list[MemoryDecision]:
    """Replay the sample (``select``), its cost said first, and set each replayed decision's verdict
    from its measured effect. Returns the replayed decisions (one that cannot be replayed, say on an
    endpoint taking JSON-schema turns, keeps its cheap verdict with a note saying why)."""
    sample = select(decisions, budget)
    if not sample:
        return []
    cost = replay_cost(sample, budget)
    say(f"counterfactual replay: {cost['decisions']} decisions x {cost['pairs']} pair(s) of arms x "
        f"{cost['horizon']} steps = {cost['steps_played']} steps with the model (about "
        f"{cost['model_calls_estimate']} model calls), {cost['steps_restored_without_model']} steps restored without it")
    started = time.perf_counter()
    for number, d in enumerate(sample):
        say(f"replaying {d.id} ({number + 1}/{len(sample)}), eta {eta(number, len(sample), time.perf_counter() - started)}")
        try:
            effect = await measure(d, scaffold, clients, budget)
        except CounterfactualError as exc:  # this decision keeps its cheap verdict; the others are replayed
            say(f"{d.id} not replayed: {exc}")
            d.notes.append(f"not replayed: {exc}")
            continue
        d.replayed = effect.record()
        if effect.effect > 0:
            d.verdict, d.reason = "accepted", f"replayed effect {effect.effect:+g} {effect.unit} > 0"
        elif not effect.differ:
            d.verdict, d.reason = "rejected", "replayed: the arms' actions never differed, effect 0"
        else:
            d.verdict, d.reason = "rejected", f"replayed effect {effect.effect:+g} {effect.unit} <= 0"
    return [d for d in sample if d.replayed is not None]


def effect_of(d: MemoryDecision) -> tuple[float, str, str, int]:
    """(effect, unit, method, window) of a decision: the replayed effect where it was replayed,
    else the cheap score's advantage."""
    if d.replayed is not None:
        return d.replayed["effect"], d.replayed["unit"], "replayed", d.replayed["window"]
    return d.score.advantage, d.score.unit, "cheap", d.score.window


def agreement(replayed: list[MemoryDecision]) -> dict:
    """How the cheap score agrees with the measured effect on the replayed sample."""
    cheap = [d.score.score for d in replayed]
    measured = [d.replayed["effect"] for d in replayed]
    accepted = [d for d in replayed if d.cheap_verdict == "accepted"]
    out = {"replayed": len(replayed), "spearman": spearman(cheap, measured),
           "effect_above_zero": sum(v > 0 for v in measured),
           "arms_never_differed": sum(not d.replayed["differ"] for d in replayed),
           "cheap_accepted": len(accepted),
           "cheap_accepted_effect_above_zero": (round(sum(d.replayed["effect"] > 0 for d in accepted) / len(accepted), 4)
                                                if accepted else None)}
    return out


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rank correlation (ties ranked by their mean rank); None below 3 pairs or when one
    side is constant, where a rank correlation says nothing."""
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    from scipy.stats import spearmanr

    return round(float(spearmanr(x, y).statistic), 4)


def effect_summary(kept: list[MemoryDecision]) -> dict:
    """The kept decisions' effects: how each was measured and their spread per unit and method."""
    rows = [effect_of(d) for d in kept]
    out: dict = {"method": {m: sum(r[2] == m for r in rows) for m in sorted({r[2] for r in rows})}, "by_unit": {}}
    for unit, method in sorted({(r[1], r[2]) for r in rows}):
        values = sorted(r[0] for r in rows if r[1] == unit and r[2] == method)
        out["by_unit"][f"{unit} ({method})"] = {
            "decisions": len(values), "min": values[0], "median": values[len(values) // 2], "max": values[-1],
            "above_zero": sum(v > 0 for v in values)}
    return out
