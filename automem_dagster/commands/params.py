"""``automem params``: write the DVC pipeline's ``params.yaml`` from the proficiency loop's config, so the file
holds no default and no help of its own (``loop/settings.py`` is where they live) and cannot drift."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import yaml

from automem_dagster.atomic import write_text_atomic
from automem_dagster.commands.shared import add_options, options_from_args
from automem_dagster.games import game_family
from automem_dagster.loop.params_file import params_of
from automem_dagster.loop.settings import ProficiencyConfig
from automem_dagster.options import leaves, value_at

PARAM_OPTIONS = tuple(key for key, leaf in leaves(ProficiencyConfig).items() if leaf.param)
"""The options the DVC pipeline reads from params.yaml (those with a ``param`` key in the config)."""

HEADER = """\
# Parameters of the DVC pipeline in dvc.yaml, written by `automem params` from the loops' config
# (automem_dagster/loop/settings.py: every default and its meaning; `automem params --help` shows them).
# Do not edit by hand: rerun the command below with the options to change (an experiment may still
# override one: `make dvc-exp DVC_ARGS="-S rollout.episodes=8"`). Written by:
#   {command}
"""


def register(sub) -> None:
    params = sub.add_parser("params", help="write params.yaml (the DVC pipeline's parameters) from the round settings "
                                           "model: its defaults, the options given, or a --settings file's values")
    params.add_argument("--game", default="crafter", help="the game the pipeline plays (default crafter)")
    params.add_argument("--endpoints", default="assets/endpoints/embedded.yaml",
                        help="endpoints YAML of the pipeline's models (default assets/endpoints/embedded.yaml)")
    add_options(params, ProficiencyConfig, PARAM_OPTIONS)
    params.add_argument("--out", type=Path, default=None, help="where to write (default: print it)")
    params.set_defaults(run=run)


def params_text(args: argparse.Namespace) -> str:
    options = options_from_args(args, ProficiencyConfig, PARAM_OPTIONS)
    # No scaffold: a round starts from the lineage's champion (or its pending challenger), as every round does.
    top = {"game": args.game, "family": game_family(args.game), "endpoints": args.endpoints}
    return HEADER.format(command=command_line(args)) + yaml.safe_dump({**top, **params_of(options)}, sort_keys=False)


def command_line(args: argparse.Namespace) -> str:
    """The command that writes this file again: the game and endpoints, the options given (a
    ``--settings`` file's values spelled out) and the output."""
    options = options_from_args(args, ProficiencyConfig, PARAM_OPTIONS)
    given = [(leaf.flag, value_at(options, leaf)) for leaf in leaves(ProficiencyConfig).values()
             if leaf.param and value_at(options, leaf) != leaf.field.default]
    words = ["automem", "params", "--game", args.game, "--endpoints", args.endpoints]
    words += [w for flag, value in given for w in (flag, "" if value is None else str(value))]
    return shlex.join(words + (["--out", str(args.out)] if args.out else []))


def run(args: argparse.Namespace) -> int:
    text = params_text(args)
    if args.out is None:
        print(text, end="")
    else:
        write_text_atomic(args.out, text)
    return 0

