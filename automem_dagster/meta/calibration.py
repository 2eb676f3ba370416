"""How well the cheap score agrees with what the replay measured, and the kept effects' summary.

Curation replays every eligible decision it can (``meta/curation_review.py``); the cheap score only
orders that replay. Every dataset still reports how the two agree on the replayed decisions: the
Spearman rank correlation of cheap score and measured effect, and the share of the decisions the
cheap score alone would accept whose measured effect is above 0. A low share says the cheap score's
acceptances are not to be trusted, which is why an unmeasured decision trains only on request.
"""

from __future__ import annotations

from automem_dagster.meta.decisions import MemoryDecision
from automem_dagster.meta.fate import Fate


def effect_of(d: MemoryDecision) -> tuple[float, str, str, int]:
    """(effect, unit, method, window) of a decision: the replayed effect where it was replayed, else
    ``unmeasured`` with the cheap score's advantage (what a decision kept by ``keep_unmeasured`` carries)."""
    if d.replayed is not None:
        return d.replayed["effect"], d.replayed["unit"], "replayed", d.replayed["window"]
    return d.score.advantage, d.score.unit, "unmeasured", d.score.window


def agreement(replayed: list[MemoryDecision]) -> dict:
    """How the cheap score agrees with the measured effect on the replayed sample."""
    cheap = [d.score.score for d in replayed]
    measured = [d.replayed["effect"] for d in replayed]
    accepted = [d for d in replayed if d.cheap_fate is Fate.ACCEPTED]
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
