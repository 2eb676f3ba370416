"""``automem plan``: each loop's round as its plan says (``loop/round_plan.py``), and the picture of it;
``automem dvc-yaml``: the DVC pipeline generated from the same plans (``loop/dvc_plan.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from automem_dagster.atomic import write_text_atomic
from automem_dagster.commands.render import console
from automem_dagster.loop.dvc_plan import dvc_yaml
from automem_dagster.loop.round_plan import PROFICIENCY_ROUND, STRUCTURE_ROUND
from automem_dagster.plots import plot_round_plans

PLANS = (STRUCTURE_ROUND, PROFICIENCY_ROUND)


def register(sub) -> None:
    plan = sub.add_parser("plan", help="the steps of each loop's round: what each reads, makes and writes, the stage "
                                       "function it runs and the DVC stages that run it; --figure draws the data flow")
    plan.add_argument("--figure", type=Path, default=None, help="also write the round's data flow as a PNG there")
    plan.set_defaults(run=run)
    dvc = sub.add_parser("dvc-yaml", help="write dvc.yaml, the DVC pipeline, from the loops' plans (never edit it by "
                                          "hand: a test checks the committed file is this output)")
    dvc.add_argument("--out", type=Path, default=None, help="where to write it, e.g. dvc.yaml (default: print it)")
    dvc.set_defaults(run=run_dvc_yaml)


def run_dvc_yaml(args: argparse.Namespace) -> int:
    text = dvc_yaml()
    if args.out is None:
        print(text, end="")
    else:
        write_text_atomic(args.out, text)
    return 0


def run(args: argparse.Namespace) -> int:
    for plan in PLANS:
        console.rule(f"{plan.loop} round")
        for step in plan.steps:
            reads = ", ".join(step.reads) or "(the champion)"
            stages = ", ".join(step.dvc) or "none"
            console.print(f"[bold]{step.name}[/bold]  reads {reads}; runs {step.stage_name}; DVC: {stages}\n"
                          f"    {step.makes}\n    writes {step.writes}")
        for outcome, meaning in plan.outcomes.items():
            console.print(f"  outcome [bold]{outcome}[/bold]: {meaning}")
    if args.figure:
        console.print(f"figure: {plot_round_plans(PLANS, args.figure)}")
    return 0
