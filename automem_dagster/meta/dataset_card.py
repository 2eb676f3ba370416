"""The dataset card: what a curated dataset holds and how far its effects can be trusted.

Written beside ``dataset.parquet`` (``card.md``, with the histogram ``effects.png``) from the
curation's ``stats.json``, so it says in words what the numbers are: how many decisions were kept
and why, how their effects were measured (replayed with and without the decision, or the cheap
score's advantage), their distribution, and how well the cheap score agreed with the replayed
effects on the sample. The training run logs both files to MLflow (``loop/report.py``).
"""

from __future__ import annotations

from pathlib import Path

from automem_dagster.atomic import write_text_atomic
from automem_dagster.meta.fate import fate_counts
from automem_dagster.plots import plot_effects

CARD = "card.md"
EFFECTS_PLOT = "effects.png"


def write_card(out: Path, stats: dict, title: str) -> Path:
    """``card.md`` (and ``effects.png`` when a decision was kept) in the dataset folder ``out``."""
    out = Path(out)
    lines = [f"# {title}", "", f"{stats['decisions']} memory decisions from {stats['episodes']} episodes; "
             f"{stats['eligible_decisions']} eligible (credited, full window); {stats['kept_decisions']} kept, "
             f"{stats['examples']} examples.", "", "Fates: " + ", ".join(
                 f"{k} {v}" for k, v in sorted(fate_counts(stats).items())) + ".", ""]
    lines += _replay_section(stats)
    lines += _effects_section(stats)
    lines += _calibration_section(stats.get("calibration") or {})
    if stats.get("kept_effect_values"):
        plot_effects(stats["kept_effect_values"], f"effects of the {stats['kept_decisions']} kept decisions",
                     out / EFFECTS_PLOT)
        lines += ["", f"![effects of the kept decisions]({EFFECTS_PLOT})"]
    else:
        (out / EFFECTS_PLOT).unlink(missing_ok=True)
    return write_text_atomic(out / CARD, "\n".join(lines) + "\n")


def _effects_section(stats: dict) -> list[str]:
    effects = stats.get("kept_effects") or {}
    if not effects.get("by_unit"):
        return ["## Effects", "", "No decision was kept, so there is no effect to show.", ""]
    rows = ["## Effects of the kept decisions", "",
            "| unit (how measured) | decisions | min | median | max | above 0 |", "|---|---|---|---|---|---|"]
    for key, e in effects["by_unit"].items():
        rows.append(f"| {key} | {e['decisions']} | {e['min']:+g} | {e['median']:+g} | {e['max']:+g} | {e['above_zero']} |")
    return [*rows, "", "Replayed: the episode restored to the decision's step and played on with and without it; "
            "unmeasured: the cheap score's advantage over its window, not a measured effect (kept only by "
            "request, --keep-unmeasured).", ""]


def _replay_section(stats: dict) -> list[str]:
    words = replay_words(stats)
    return ["## How the effects were measured", "", words, ""] if words else []


def replay_words(stats: dict) -> str:
    """How the effects were measured, in words: the floor and its rule, what was left unmeasured, what the
    replay cost (empty for a curation recorded before the replay was every eligible decision's)."""
    r = stats.get("replay")
    if not r:
        return ""
    lines = [f"{r['replayed']} eligible decisions replayed with and without them. Credit floor {r['floor']:g}: the "
             f"largest difference of {r['floor_pairs']} A/A pair(s) (as made against as made, same seeds, nothing "
             f"removed). Rule: {r['floor_rule']}."]
    if r["unmeasured"]:
        kept = stats.get("unmeasured_kept", 0)
        fate = (f"{kept} of them are in the dataset, marked unmeasured (--keep-unmeasured)" if kept
                else "none of them trains")
        lines.append(f"{r['unmeasured']} eligible decisions were left unmeasured ({r['unmeasured_why']}): {fate}.")
    cost = r["cost"]
    lines.append(f"Cost: estimated at most {cost['estimate']['steps_played']} steps with the model (about "
                 f"{cost['estimate']['model_calls_estimate']} calls); spent {cost['model_calls']} model calls in "
                 f"{cost['seconds']:g} s.")
    return " ".join(lines)

MIN_REPLAYED = 2
"""Fewer replayed decisions than this say nothing about the cheap score's agreement: the card says so."""


def calibration_words(c: dict) -> str:
    """The calibration of the cheap score on the replayed sample (``stats['calibration']``), in words."""
    replayed = c.get("replayed") or 0
    if replayed < MIN_REPLAYED:
        why = ("none was replayed (a replay budget of 0, no endpoints given to curation, or no eligible decision)"
               if not replayed else "only 1 was replayed")
        return (f"Not enough replayed decisions to say how far the cheap score can be trusted on this dataset: {why}; "
                f"at least {MIN_REPLAYED} are needed (`--replay-decisions`).")
    rho = "not defined (fewer than 3 decisions, or one side constant)" if c["spearman"] is None else f"{c['spearman']:+.2f}"
    share = ("no decision the cheap score accepts was replayed" if c["cheap_accepted_effect_above_zero"] is None
             else f"{c['cheap_accepted_effect_above_zero']:.0%} of the {c['cheap_accepted']} replayed decisions the "
                  "cheap score alone accepts had a measured effect above 0")
    return (f"{replayed} decisions replayed: {c['effect_above_zero']} with an effect above 0, "
            f"{c['arms_never_differed']} whose arms never differed (effect exactly 0). Spearman rank correlation of "
            f"cheap score and measured effect: {rho}; {share}.")


def _calibration_section(c: dict) -> list[str]:
    return ["## Calibration of the cheap score", "", calibration_words(c)]
