"""``automem``: the command line. Each command group lives in ``automem_dagster/commands`` with
``register(subparsers)`` and a ``run`` per command; every command calls the same functions the
Dagster assets call."""

from __future__ import annotations

import argparse
import sys

from rich.markup import escape

from automem_dagster.commands import (
    budget_flags,
    curve,
    demo,
    endpoints,
    evaluate,
    facts,
    headroom,
    noise,
    params,
    plan,
    proficiency,
    rollout,
    rollout_view,
    shared,
    structure,
    table,
    worker,
)
from automem_dagster.commands.render import console
from automem_dagster.llm.client import EndpointError
from automem_dagster.llm.config import EndpointConfigError
from automem_dagster.llm.process import ServerStartError
from automem_dagster.loop.errors import RoundError
from automem_dagster.meta.curate import CurationError, DatasetTooSmall
from automem_dagster.meta.diagnose import DiagnosisError
from automem_dagster.rollout import RolloutError
from automem_dagster.scaffold import ScaffoldError
from automem_dagster.scaffold.lineage import LineageError
from automem_dagster.tracking import TrackingError
from automem_dagster.training.base_model import BaseModelError
from automem_dagster.training.registry import RegistryError
from automem_dagster.training.sft_result import TrainingError

COMMAND_MODULES = (rollout, demo, structure, table, curve, evaluate, headroom, facts, noise, proficiency, plan, params,
                   endpoints, worker)
"""The command groups, in the order ``automem --help`` lists them."""

USER_ERRORS = (ScaffoldError, EndpointConfigError, RolloutError, RoundError, DiagnosisError, LineageError, TrackingError,
               EndpointError, ValueError, argparse.ArgumentTypeError, DatasetTooSmall, CurationError, RegistryError,
               TrainingError, BaseModelError, ServerStartError)
"""Errors that name the bad input and what to do: printed in one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="automem", description="AutoMem-Dagster: learned agent memory as MLOps.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    for command in sub.choices.values():
        budget_flags.refuse_retired_flags(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        shared.canonical_game(args)
        return args.run(args)
    except RolloutError as exc:
        report = rollout_view.failure_report(exc, argv)
        console.print(f"[red]error:[/red] {escape(report)}", soft_wrap=True)
        print(report)  # on stdout too: a script or CI log that keeps only stdout still says what to do
        return 2
    except USER_ERRORS as exc:
        # Escaped: a message may hold brackets (an extra). Soft-wrapped: rich would break a long path
        # mid-name at the console's width, and a person copies paths out of these messages.
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
