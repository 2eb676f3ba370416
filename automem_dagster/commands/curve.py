"""``automem curve``: the learning curve of a game family from MLflow (``loop.curve``), as a table and a
plot: every decided round of both loops on one seed set and step budget, in the order they ran. The
curve is logged back as one run of ``automem-<family>-tables`` (the plot, the table, and per round
the challenger's, the champion's and the agent in service's progression), like ``automem table``."""

from __future__ import annotations

import argparse
from pathlib import Path

from automem_dagster import tracking
from automem_dagster.atomic import write_text_atomic
from automem_dagster.commands import shared
from automem_dagster.commands.render import console
from automem_dagster.commands.shared import add_game_arg
from automem_dagster.games import game_family
from automem_dagster.loop.curve import learning_curve
from automem_dagster.plots import plot_learning_curve


def register(sub) -> None:
    p = sub.add_parser("curve", help="the learning curve: progression by round of both loops (challenger, champion, "
                                     "decision), read from MLflow, as a table and a plot")
    add_game_arg(p)
    p.add_argument("--out", type=Path, default=None,
                   help="folder for learning_curve.png and learning_curve.md (default: runs/reports/<family>)")
    p.add_argument("--no-tracking", action="store_true", help="do not log the curve to MLflow")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    family = game_family(args.game)
    tracker = tracking.Tracker()
    curve = learning_curve(family, tracker.runs_for(family))
    out = args.out or shared.STORAGE.runs / "reports" / family
    out.mkdir(parents=True, exist_ok=True)
    figure = plot_learning_curve(curve, out / "learning_curve.png")
    text = curve.markdown()
    write_text_atomic(out / "learning_curve.md", text + "\n")
    console.print(text, markup=False, highlight=False)
    console.print(f"figure: {figure}; table: {out / 'learning_curve.md'}")
    if not args.no_tracking:
        logged = tracker.log_table(family, "learning-curve", {"seeds": curve.seeds, "max_steps": curve.max_steps,
                                                              "rounds": len(curve.rounds), "left_out": curve.left_out},
                                curve.metrics(), [figure, out / "learning_curve.md"])
        console.print(f"MLflow: {logged.url}")
    return 0
