"""``automem noise``: measure the noise floor of a game's champion (an A/A evaluation, ``loop.noise``)."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from rich.console import Console

from automem_dagster.commands import shared
from automem_dagster.commands.shared import EVALUATION_OPTIONS, add_game_arg, add_options, options_from_args, session
from automem_dagster.loop.evaluation import evaluation_spec, play_interleaved, stored_noise
from automem_dagster.loop.noise import NoiseRecord, measure_noise, noise_path, replay_spec
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import load_champion
from automem_dagster.paths import DEFAULT_ENDPOINTS


def register(sub) -> None:
    p = sub.add_parser("noise", help="measure the noise floor: the champion against a fresh replay of itself on the "
                                     "fixed evaluation seeds (an A/A evaluation), stored per game and batch identity")
    add_game_arg(p)
    add_options(p, StructureConfig, EVALUATION_OPTIONS)
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS,
                   help="endpoints YAML (default: embedded model)")
    p.set_defaults(run=run_noise)


def noise_settings(args: argparse.Namespace) -> StructureConfig:
    """The evaluation budget the floor is measured on: the round config's (``loop/settings.StructureConfig``),
    so that with its defaults the command measures the identity a default round's evaluation plays and reads
    (with ``--settings params.yaml``, the DVC round's)."""
    return options_from_args(args, StructureConfig, EVALUATION_OPTIONS).for_game(args.game)


def run_noise(args: argparse.Namespace) -> int:
    """Play the champion's evaluation batch (reused where it was played) and a fresh replay of it side by
    side, then store and print the floor; an identity already measured is printed, not replayed."""
    settings = noise_settings(args)
    champion = load_champion(settings.family, shared.STORAGE)
    first = evaluation_spec(settings, champion, shared.STORAGE)
    console = Console(soft_wrap=True)
    known = stored_noise(first, shared.STORAGE)
    if known is not None:
        console.print(f"{known.describe()}\nmeasured {known.measured_at}; stored in "
                      f"{noise_path(shared.STORAGE, known.game, known.identity)} (delete it to measure again)")
        return 0
    console.print(f"A/A evaluation of {args.game} v{champion.version}: {len(first.seeds)} seeds x "
                  f"{settings.budget.eval_max_steps} steps, played twice side by side (the first play is reused where it "
                  "was played before)")
    started = time.monotonic()

    async def go():
        async with session(args.endpoints) as (clients, progress):
            return await play_interleaved([(first, clients), (replay_spec(first, "aa"), clients)], progress)

    played, replayed = asyncio.run(go())
    record = measure_noise(played, replayed, shared.STORAGE)
    print_noise(console, record, time.monotonic() - started)
    return 0


def print_noise(console: Console, record: NoiseRecord, seconds: float) -> None:
    console.print(record.describe())
    for metric, floor in record.metric_floors.items():
        console.print(f"  {metric}: noise floor {floor:.4g}")
    console.print(f"cost: {record.cost['episodes']} replayed episodes, {record.cost['steps']} steps, {seconds:.0f} s "
                  f"wall; stored in {noise_path(shared.STORAGE, record.game, record.identity)}")
    if record.bit_identical:
        console.print("the replay repeated every episode bit for bit: rounds may reuse this champion batch")
    else:
        console.print("the replay differed: rounds play the champion again beside each challenger")
