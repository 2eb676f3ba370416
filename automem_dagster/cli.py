"""``automem``: the command line. Every command calls the same functions the Dagster assets call."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from automem_dagster.games import game_family
from automem_dagster.llm.config import EndpointConfigError, load_endpoints
from automem_dagster.llm.session import connect
from automem_dagster.paths import DEFAULT_ENDPOINTS, RUNS
from automem_dagster.rollout import BatchSummary, RolloutError, RolloutSpec, run_batch
from automem_dagster.scaffold import ScaffoldError, load_scaffold

DEMO_GAMES = ("crafter", "minihack:Corridor-R3", "nethack")

console = Console(stderr=True)


def parse_seeds(text: str) -> list[int]:
    """``"42,43,50-52"`` -> [42, 43, 50, 51, 52]; a clear error for anything else."""
    seeds: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise argparse.ArgumentTypeError(f"--seeds: {part!r} is not a seed or a range like 42-45")
        seeds += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give at least one seed and no seed twice")
    return seeds


def default_out(game: str, version: int, seeds: list[int], max_steps: int) -> Path:
    """A path determined by the batch's settings, so rerunning the same command resumes it."""
    name = f"steps{max_steps}-seeds{seeds[0]}-{seeds[-1]}-n{len(seeds)}"
    return RUNS / "rollouts" / game.replace(":", "-") / f"v{version}" / name


def rollout_specs(args: argparse.Namespace, games: list[str]) -> list[RolloutSpec]:
    seeds = args.seeds or list(range(42, 42 + args.episodes))
    if args.seeds and args.episodes not in (None, len(seeds)):
        raise argparse.ArgumentTypeError(f"--episodes {args.episodes} does not match the {len(seeds)} seeds given")
    specs = []
    for game in games:
        scaffold = load_scaffold(game_family(game), args.scaffold)
        out = Path(args.out) / game.replace(":", "-") if args.out and len(games) > 1 else args.out
        specs.append(RolloutSpec(game, scaffold, seeds, args.max_steps,
                                 Path(out) if out else default_out(game, scaffold.version, seeds, args.max_steps),
                                 concurrency=args.concurrency))
    return specs


async def _run_specs(specs: list[RolloutSpec], endpoints_path: Path) -> list[BatchSummary]:
    config = load_endpoints(endpoints_path)
    log_dir = RUNS / "logs"
    summaries = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:
        async with connect(config, log_dir) as clients:
            for spec in specs:
                tasks: dict[str, int] = {}

                def progress(eid: str, steps: int, finished: bool, spec=spec, tasks=tasks) -> None:
                    if eid not in tasks:
                        tasks[eid] = bar.add_task(eid, total=spec.max_steps)
                    bar.update(tasks[eid], completed=spec.max_steps if finished else steps)

                summaries.append(await run_batch(spec, clients, progress))
    return summaries


def print_summary(summary: BatchSummary) -> None:
    table = Table(title=f"{summary.game}: {summary.progression or 'no finished episodes'}")
    for col in ("seed", "steps", "progression %", "reward", "valid actions %", "model calls"):
        table.add_column(col, justify="right")
    for e in summary.episodes:
        table.add_row(str(e.seed), str(e.steps), f"{100 * e.progression:.1f}", f"{e.total_reward:g}",
                      f"{100 * e.valid_action_rate:.0f}", str(e.model_calls))
    Console().print(table)
    b = summary.behaviour
    if b is not None:
        metrics = Table(title="behaviour (pooled over episodes)", show_header=False)
        for key, value in b.as_dict().items():
            metrics.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
        Console().print(metrics)
    Console().print(f"output: {summary.out_dir}")


def _add_rollout_args(p: argparse.ArgumentParser, with_game: bool) -> None:
    if with_game:
        p.add_argument("--game", required=True, help="crafter, nethack, minihack:<Task> or a MiniHack id")
    p.add_argument("--scaffold", default="v0", help="scaffold version of the game family (default v0)")
    p.add_argument("--episodes", type=int, default=None, help="number of episodes (seeds 42, 43, ... unless --seeds)")
    p.add_argument("--seeds", type=parse_seeds, default=None, help="seeds, e.g. 42,43 or 42-45")
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--concurrency", type=int, default=2, help="episodes played at once")
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: embedded model)")
    p.add_argument("--out", type=Path, default=None, help="batch directory (default: derived from the settings)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="automem", description="AutoMem-Dagster: learned agent memory as MLOps.")
    sub = parser.add_subparsers(dest="command", required=True)
    rollout = sub.add_parser("rollout", help="play episodes with a scaffold version and write trajectories")
    _add_rollout_args(rollout, with_game=True)
    demo = sub.add_parser("demo", help="a short rollout on Crafter, MiniHack Corridor-R3 and NetHack")
    _add_rollout_args(demo, with_game=False)
    demo.set_defaults(max_steps=12)
    args = parser.parse_args(argv)
    try:
        if args.episodes is None and args.seeds is None:
            args.episodes = 2 if args.command == "demo" else 4
        games = [args.game] if args.command == "rollout" else list(DEMO_GAMES)
        specs = rollout_specs(args, games)
        for summary in asyncio.run(_run_specs(specs, args.endpoints)):
            print_summary(summary)
    except (ScaffoldError, EndpointConfigError, RolloutError, ValueError, argparse.ArgumentTypeError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
