"""``automem table``: the AutoMem paper's behaviour table for a game family, first scaffold against
the final champion on the fixed evaluation seeds (``loop.paper_table``)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from automem_dagster import tracking
from automem_dagster.commands import shared
from automem_dagster.commands.render import console
from automem_dagster.commands.shared import EVALUATION_OPTIONS, add_game_arg, add_options, options_from_args, session
from automem_dagster.games import game_family
from automem_dagster.loop.paper_table import PaperTable, paper_table
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.paths import DEFAULT_ENDPOINTS


def register(sub) -> None:
    table = sub.add_parser("table", help="the paper's behaviour table: the first scaffold against the final champion "
                                         "on the fixed evaluation seeds, with a figure; logged to MLflow and Dagster")
    add_game_arg(table)
    add_options(table, StructureConfig, EVALUATION_OPTIONS)
    table.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS,
                       help="endpoints YAML (default: embedded model)")
    table.add_argument("--first", type=int, default=None,
                       help="the version to compare the champion with (default: the lineage's first, v0)")
    table.add_argument("--final", type=int, default=None,
                       help="the version compared instead of the champion (a rolled-back candidate: what its round "
                            "measured, in the table's terms)")
    table.add_argument("--no-tracking", action="store_true", help="do not log the table to MLflow")
    table.set_defaults(run=run_table)


def run_table(args: argparse.Namespace) -> int:
    """The table on the round options' evaluation budget (``loop/settings.StructureConfig``): with its
    defaults, the seeds and steps a default round evaluated its versions on."""
    settings = options_from_args(args, StructureConfig, EVALUATION_OPTIONS).for_game(args.game)
    seeds = settings.eval_seed_list(shared.STORAGE.seeds_file)

    async def go() -> PaperTable:
        async with session(args.endpoints) as (clients, progress):
            return await paper_table(args.game, settings.budget.eval_max_steps, seeds, clients, shared.STORAGE,
                                     settings.budget.concurrency, progress, args.first, args.final)

    table = asyncio.run(go())
    console.print(table.markdown(), markup=False, highlight=False)
    console.print(f"figure: {table.files['figure']}; table: {table.files['markdown']}")
    if not args.no_tracking:
        run = log_table(tracking.Tracker(), table)
        console.print(f"MLflow: {run.url}")
    console.print(show_table_in_dagster(table))
    return 0


def log_table(tracker: tracking.Tracker, table: PaperTable) -> tracking.TrackedRun:
    """The table as one MLflow run: its budget as params, every cell as a metric, its files as artifacts."""
    metrics = {}
    for row in table.rows:
        for name in ("first", "final", "difference", "ci_low", "ci_high", "p_value", "relative_change"):
            if getattr(row, name) is not None:
                metrics[f"{row.metric}.{name}"] = getattr(row, name)
    params = {"game": table.game, "first_version": table.first_version, "final_version": table.final_version,
              "seeds": ",".join(map(str, table.seeds)), "max_steps": table.max_steps}
    return tracker.log_table(game_family(table.game), f"table v{table.first_version}-v{table.final_version}", params,
                             metrics, [Path(p) for p in table.files.values()])


def show_table_in_dagster(table: PaperTable) -> str:
    """The table on the champion's Dagster page (``defs/paper_table.py``); without the dagster extra, a line
    saying it is not shown there (the table's files and MLflow run are all the same)."""
    shown = shared.defs_module("paper_table")
    if shown is None:
        return "Dagster: not installed (the `dagster` extra, docs/install.md), so its UI does not show the table"
    return shown.report_paper_table(table)
