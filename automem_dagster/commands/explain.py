"""``automem curate --explain EPISODE:STEP``: one memory decision's two replayed arms side by side.

The counterfactual replay (``meta/counterfactual.py``) restores the episode to the decision's step
and plays it on as made and ablated; this prints both arms step by step (action, progression and
reward, the memory operations and their results, errors) and the effect the difference amounts to,
so a user can see why a decision was kept or dropped.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from automem_dagster.meta.counterfactual import Effect
from automem_dagster.meta.decisions import MemoryDecision

console = Console()


def parse_target(text: str) -> tuple[str, int]:
    """``EPISODE:STEP`` (as ``decisions.jsonl`` names them, e.g. ``crafter__seed7:12``) as (episode, step)."""
    episode, _, step = text.rpartition(":")
    if not episode or not step.isdigit():
        raise argparse.ArgumentTypeError(f"--explain {text!r}: expected EPISODE:STEP, e.g. crafter__seed7:12 "
                                         "(the episode as decisions.jsonl names it, the step a number)")
    return episode, int(step)


def print_arms(decision: MemoryDecision, effect: Effect) -> None:
    """Each pair of arms as a table (one row per step), then the decision's effect."""
    console.rule(f"{decision.id}: {'; '.join(decision.ops) or '(no operation)'}")
    for number, pair in enumerate(effect.arms, 1):
        table = Table(title=f"pair {number} of {len(effect.arms)}", show_lines=True)
        table.add_column("step", justify="right")
        table.add_column("as made")
        table.add_column("ablated")
        made, ablated = pair["made"]["steps"], pair["ablated"]["steps"]
        for i in range(max(len(made), len(ablated))):
            cells = [_cell(arm[i]) if i < len(arm) else "(episode ended)" for arm in (made, ablated)]
            table.add_row(str((made or ablated)[i]["step"] if i < len(made or ablated) else ""), *cells)
        table.add_row("gain", f"{pair['made']['gain']:+g} {effect.unit}", f"{pair['ablated']['gain']:+g} {effect.unit}")
        table.add_row("errors", str(pair["made"]["errors"]), str(pair["ablated"]["errors"]))
        console.print(table)
    if effect.unresolved:
        verdict = (f"unresolved at horizon {effect.horizon}: the arms' memory differed but their play did not "
                   f"diverge within {effect.horizon} steps (its content was last read at step {effect.last_read})")
    elif not effect.differ:
        verdict = "the arms' play never diverged up to the last read of its content: effect exactly 0"
    else:
        verdict = (f"effect {effect.effect:+g} {effect.unit} over {effect.window} steps (gain {effect.gain:+g}, "
                   f"errors avoided {effect.errors_avoided:+g})")
    console.print(f"{decision.id}: {verdict}; cheap score {decision.score.score:+g} "
                  f"(advantage {decision.score.advantage:+g} {decision.score.unit})")


def _cell(step: dict) -> str:
    lines = [f"{step['action']}{'' if step['valid'] else ' (invalid)'}  progression {step['progression']:.2f}"
             + (f"  reward {step['reward']:+g}" if step["reward"] else "")]
    lines += step["memory"][:4]
    lines += [f"warning: {w}" for w in step["warnings"]]
    if step["errors"]:
        lines.append(f"errors: {step['errors']}")
    return "\n".join(lines)
