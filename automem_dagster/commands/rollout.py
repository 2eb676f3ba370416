"""``automem rollout``: play episodes with a scaffold version (or a baseline) and write trajectories."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from automem_dagster.agent.memory_settings import needs_embed
from automem_dagster.commands import shared
from automem_dagster.commands.render import print_summary
from automem_dagster.commands.shared import (
    add_agent_args,
    add_game_arg,
    add_options,
    add_output_args,
    options_from_args,
    parse_seeds,
    session,
)
from automem_dagster.loop.proficiency import in_service, start_proficiency_round
from automem_dagster.loop.records import write_resumed
from automem_dagster.loop.seed_blocks import round_seeds
from automem_dagster.loop.settings import ProficiencyConfig, StructureConfig
from automem_dagster.loop.storage import batch_dir, resolve_scaffold
from automem_dagster.loop.structure import start_round
from automem_dagster.rollout import BatchSummary, RolloutSpec, run_batch


def register(sub) -> None:
    p = sub.add_parser("rollout", help="play episodes with a scaffold version and write trajectories")
    add_game_arg(p)
    p.add_argument("--scaffold", default="v0", help="scaffold: v<N>, champion, or a YAML file (default v0)")
    p.add_argument("--seeds", type=parse_seeds, default=None,
                   help="seeds, e.g. 42,43 or 42-45 (default: the game's first --rollout-episodes training seeds, "
                        "never evaluation seeds)")
    add_options(p, StructureConfig, ROLLOUT_OPTIONS)
    add_output_args(p)
    p.add_argument("--training", nargs="?", const="structure", choices=("structure", "proficiency"), default=None,
                   help="draw --rollout-episodes seeds from the training range: the next block of that loop's round, "
                        "as its CLI and Dagster rounds draw it (default structure: one block per version in the "
                        "lineage; proficiency: per adapter in the specialist registry), on that loop's default budget")
    p.add_argument("--seed-block", type=lambda text: int(text) if text else None, default=None,
                   help="with --training or --round, this block instead of the loop's next one (empty: the next one)")
    p.add_argument("--round", choices=("structure", "proficiency"), default=None,
                   help="start that loop's round into --out as the CLI and Dagster rounds start it (the DVC rollout "
                        "stages): resume a challenger an earlier round left pending (play nothing, write resumed.json) "
                        "or play the lineage's champion, by the agent in service, on the loop's next block of training seeds")
    add_agent_args(p)
    p.set_defaults(run=run)


ROLLOUT_OPTIONS = ("budget.rollout_episodes", "budget.rollout_max_steps", "budget.concurrency")
"""The budget ``rollout`` plays: a round's training rollouts (``loop/settings.py``), under the same flags."""


def run(args: argparse.Namespace) -> int:
    config = rollout_budget(args)
    if args.round:
        return start_pipeline_round(args, config)
    if args.training:
        if args.seeds:
            raise argparse.ArgumentTypeError("--training draws its own seeds: give --rollout-episodes, not --seeds")
        seeds = round_seeds(args.training, args.game, config.budget.rollout_episodes, shared.STORAGE, args.seed_block)
    elif args.seed_block is not None:
        raise argparse.ArgumentTypeError("--seed-block chooses a block of training seeds: give --training too")
    else:
        seeds = args.seeds or round_seeds("structure", args.game, config.budget.rollout_episodes, shared.STORAGE, block=0)
    play(args, config, seeds)
    return 0


def rollout_budget(args: argparse.Namespace) -> StructureConfig:
    """The budget from the options given, a ``--settings`` file, else the defaults of the loop the rollout
    plays for (``--training proficiency`` or ``--round proficiency``: a proficiency round's longer episodes).
    ``--rollout-episodes`` beside ``--seeds`` must count them."""
    loop = ProficiencyConfig if "proficiency" in (args.training, args.round) else StructureConfig
    config = options_from_args(args, loop, ROLLOUT_OPTIONS).for_game(args.game)
    if args.seeds and hasattr(args, "rollout_episodes") and args.rollout_episodes != len(args.seeds):
        raise argparse.ArgumentTypeError(f"--rollout-episodes {args.rollout_episodes} does not match the "
                                         f"{len(args.seeds)} seeds given")
    return config


def play(args: argparse.Namespace, config: StructureConfig, seeds: list[int]) -> None:
    """Play ``seeds`` of ``args.game`` on ``config``'s budget with the options of ``rollout`` and print the batch."""
    agent, window = args.agent, args.window
    settings = shared.agent_settings(args)
    scaffold = resolve_scaffold(args.game, args.scaffold, shared.STORAGE)
    steps = config.budget.rollout_max_steps
    out = Path(args.out) if args.out else batch_dir(shared.STORAGE.runs, "rollouts", args.game, scaffold.version,
                                                    seeds, steps, agent, window, settings)
    spec = RolloutSpec(args.game, scaffold, seeds, steps, out, concurrency=config.budget.concurrency, agent=agent,
                       window=window, settings=settings, fixed_dir=args.out is not None)
    print_summary(asyncio.run(_play_one(spec, args.endpoints)))


async def _play_one(spec: RolloutSpec, endpoints_path: Path) -> BatchSummary:
    """Play ``spec`` with the one-model agent (a ``memory:`` endpoint serves only specialist evaluations)."""
    async with session(endpoints_path, needs_model=spec.agent != "random",
                       embed=needs_embed(spec.agent, spec.settings)) as (clients, progress):
        return await run_batch(spec, clients, progress)


def start_pipeline_round(args: argparse.Namespace, config: StructureConfig) -> int:
    """``--round``: the round's start (``start_round`` / ``start_proficiency_round``) into ``--out``."""
    if args.out is None or args.seeds or args.training or args.agent != "memory":
        raise argparse.ArgumentTypeError("--round plays the round's own seeds with the memory agent into --out: give "
                                         "--out and --rollout-episodes, and no --seeds, --training or --agent")
    config = config.model_copy(update={"seed_block": args.seed_block})
    if args.round == "structure":
        start, role, serving = start_round(config, shared.STORAGE), "candidate", None
        pending = start.pending.version if start.resumes else None
    else:
        start, role = start_proficiency_round(config, shared.STORAGE), "specialist"
        pending, serving = start.pending.id if start.resumes else None, in_service(shared.STORAGE, config.family)
    if pending is not None:
        write_resumed(args.out, role, pending)
        print(f"resumes the pending {role} {pending} of an earlier round: nothing to play, its evaluation follows")
        return 0
    spec = RolloutSpec(args.game, start.scaffold, start.seeds, config.budget.rollout_max_steps, Path(args.out),
                       config.budget.concurrency, fixed_dir=True)
    # The agent in service plays: the two-model agent with its specialist once one was kept.
    print_summary(asyncio.run(shared.play_as(spec, args.endpoints, serving)))
    return 0
