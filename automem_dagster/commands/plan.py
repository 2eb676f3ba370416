"""``automem plan``: each loop's round as its plan says (``loop/round_plan.py``), and the picture of it."""

from __future__ import annotations

import argparse
from pathlib import Path

from automem_dagster.commands.render import console
from automem_dagster.loop.round_plan import PROFICIENCY_ROUND, STRUCTURE_ROUND
from automem_dagster.plots import plot_round_plans

PLANS = (STRUCTURE_ROUND, PROFICIENCY_ROUND)


def register(sub) -> None:
    plan = sub.add_parser("plan", help="the steps of each loop's round: what each reads and makes, and the DVC "
                                       "stages that run it; --figure draws the data flow")
    plan.add_argument("--figure", type=Path, default=None, help="also write the round's data flow as a PNG there")
    plan.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for plan in PLANS:
        console.rule(f"{plan.loop} round")
        for step in plan.steps:
            reads = ", ".join(step.reads) or "(the champion)"
            stages = ", ".join(step.dvc) or "none"
            console.print(f"[bold]{step.name}[/bold]  reads {reads}; DVC: {stages}\n    {step.makes}")
        for outcome, meaning in plan.outcomes.items():
            console.print(f"  outcome [bold]{outcome}[/bold]: {meaning}")
    if args.figure:
        console.print(f"figure: {plot_round_plans(PLANS, args.figure)}")
    return 0
