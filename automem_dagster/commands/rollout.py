"""``automem rollout``: play episodes with a scaffold version (or a baseline) and write trajectories."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from automem_dagster.agent.baselines import DEFAULT_WINDOW
from automem_dagster.agent.memory_settings import needs_embed
from automem_dagster.commands import shared
from automem_dagster.commands.render import print_summary
from automem_dagster.commands.shared import (
    add_agent_args,
    add_game_arg,
    add_play_args,
    parse_seeds,
    session,
)
from automem_dagster.loop.proficiency import in_service, start_proficiency_round
from automem_dagster.loop.records import write_resumed
from automem_dagster.loop.seed_blocks import round_seeds
from automem_dagster.loop.settings import ProficiencySettings, RoundSettings
from automem_dagster.loop.storage import batch_dir, resolve_scaffold, slug
from automem_dagster.loop.structure import start_round
from automem_dagster.rollout import BatchSummary, RolloutSpec, run_batch


def register(sub) -> None:
    p = sub.add_parser("rollout", help="play episodes with a scaffold version and write trajectories")
    add_rollout_args(p, with_game=True)
    p.add_argument("--training", nargs="?", const="structure", choices=("structure", "proficiency"), default=None,
                   help="draw --episodes seeds from the training range (disjoint from evaluation seeds): the next block "
                        "of that loop's round, as its CLI and Dagster rounds draw it (default structure: one block per "
                        "version in the lineage; proficiency: per adapter in the specialist registry)")
    p.add_argument("--seed-block", type=lambda text: int(text) if text else None, default=None,
                   help="with --training or --round, this block instead of the loop's next one (empty: the next one)")
    p.add_argument("--round", choices=("structure", "proficiency"), default=None,
                   help="start that loop's round into --out as the CLI and Dagster rounds start it (the DVC rollout "
                        "stages): resume a challenger an earlier round left pending (play nothing, write resumed.json) "
                        "or play the lineage's champion, by the agent in service, on the loop's next block of training seeds")
    add_agent_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.episodes is None and args.seeds is None:
        args.episodes = 4
    if args.round:
        return start_pipeline_round(args)
    if args.training:
        if args.seeds:
            raise argparse.ArgumentTypeError("--training draws its own seeds: give --episodes, not --seeds")
        args.seeds = round_seeds(args.training, args.game, args.episodes, shared.STORAGE, args.seed_block)
    elif args.seed_block is not None:
        raise argparse.ArgumentTypeError("--seed-block chooses a block of training seeds: give --training too")
    play(args, [args.game])
    return 0


def play(args: argparse.Namespace, games: list[str]) -> None:
    """Play ``games`` with the options of ``rollout`` (or ``demo``) and print each batch."""
    for summary in asyncio.run(_run_specs(rollout_specs(args, games), args.endpoints)):
        print_summary(summary)


def add_rollout_args(p: argparse.ArgumentParser, with_game: bool) -> None:
    if with_game:
        add_game_arg(p)
    p.add_argument("--scaffold", default="v0", help="scaffold: v<N>, champion, or a YAML file (default v0)")
    p.add_argument("--episodes", type=int, default=None, help="number of episodes (seeds 42, 43, ... unless --seeds)")
    p.add_argument("--seeds", type=parse_seeds, default=None, help="seeds, e.g. 42,43 or 42-45")
    add_play_args(p, max_steps=50)


def rollout_specs(args: argparse.Namespace, games: list[str]) -> list[RolloutSpec]:
    seeds = args.seeds or list(range(42, 42 + args.episodes))
    if args.seeds and args.episodes not in (None, len(seeds)):
        raise argparse.ArgumentTypeError(f"--episodes {args.episodes} does not match the {len(seeds)} seeds given")
    agent, window = getattr(args, "agent", "memory"), getattr(args, "window", DEFAULT_WINDOW)
    settings = shared.agent_settings(args)
    specs = []
    for game in games:
        scaffold = resolve_scaffold(game, args.scaffold, shared.STORAGE)
        out = Path(args.out) / slug(game) if args.out and len(games) > 1 else args.out
        specs.append(RolloutSpec(game, scaffold, seeds, args.max_steps,
                                 Path(out) if out else batch_dir(shared.STORAGE.runs, "rollouts", game, scaffold.version, seeds,
                                                                 args.max_steps, agent, window, settings),
                                 concurrency=args.concurrency, agent=agent, window=window, settings=settings,
                                 fixed_dir=out is not None))
    return specs


async def _run_specs(specs: list[RolloutSpec], endpoints_path: Path) -> list[BatchSummary]:
    """Play ``specs`` with the one-model agent (a ``memory:`` endpoint serves only specialist evaluations)."""
    embed = any(needs_embed(s.agent, s.settings) for s in specs)
    async with session(endpoints_path, needs_model=any(s.agent != "random" for s in specs),
                       embed=embed) as (clients, progress):
        return [await run_batch(spec, clients, progress) for spec in specs]


def start_pipeline_round(args: argparse.Namespace) -> int:
    """``--round``: the round's start (``start_round`` / ``start_proficiency_round``) into ``--out``."""
    if args.out is None or args.seeds or args.training or args.agent != "memory":
        raise argparse.ArgumentTypeError("--round plays the round's own seeds with the memory agent into --out: give "
                                         "--out and --episodes, and no --seeds, --training or --agent")
    budget = RoundSettings(args.game, rollout_episodes=args.episodes, rollout_max_steps=args.max_steps,
                           concurrency=args.concurrency, seed_block=args.seed_block)
    if args.round == "structure":
        start, role, serving = start_round(budget, shared.STORAGE), "candidate", None
        pending = start.pending.version if start.resumes else None
    else:
        start, role = start_proficiency_round(ProficiencySettings(budget), shared.STORAGE), "specialist"
        pending, serving = start.pending.id if start.resumes else None, in_service(shared.STORAGE, budget.family)
    if pending is not None:
        write_resumed(args.out, role, pending)
        print(f"resumes the pending {role} {pending} of an earlier round: nothing to play, its evaluation follows")
        return 0
    spec = RolloutSpec(args.game, start.scaffold, start.seeds, args.max_steps, Path(args.out), args.concurrency,
                       fixed_dir=True)
    # The agent in service plays: the two-model agent with its specialist once one was kept.
    print_summary(asyncio.run(shared.play_as(spec, args.endpoints, serving)))
    return 0
