"""``automem headroom``: how much a memory can be worth in a game, measured before any loop runs.

Three arms on the same evaluation seeds: ``oracle`` (the needed facts always in memory: the ceiling
with this actor), ``none`` (the window baseline with no history: no memory at all) and the scaffold
(v0 by default: what the memory model makes of it). If the oracle is no better than none, the actor
cannot use a note and no memory decision can matter; if the scaffold sits at none, its memory
model keeps nothing useful yet, which is the room the loops have. The table gives each arm's mean
± standard error and the paired differences (``metrics.paired.compare_paired``: mean, bootstrap
interval, one-sided permutation p), and names the actor that chose the actions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from automem_dagster.atomic import write_text_atomic
from automem_dagster.commands import shared
from automem_dagster.commands.shared import (
    EVALUATION_OPTIONS,
    add_game_arg,
    add_options,
    add_output_args,
    options_from_args,
    session,
)
from automem_dagster.loop.evaluation import evaluation_batch
from automem_dagster.loop.gate import per_seed
from automem_dagster.loop.settings import MEASURE, StructureConfig
from automem_dagster.loop.storage import batch_dir, resolve_scaffold
from automem_dagster.metrics.paired import compare_paired
from automem_dagster.rollout import BatchSummary, RolloutSpec, run_batch
from automem_dagster.scaffold import Scaffold

PAIRS = (("oracle", "none"), ("scaffold", "none"), ("oracle", "scaffold"))
"""The paired differences the table shows: the ceiling's room, the scaffold's gain, what is left."""


def register(sub) -> None:
    p = sub.add_parser("headroom", help="memory's headroom in a game: oracle, no memory and a scaffold on the same "
                                        "evaluation seeds, with paired differences")
    add_game_arg(p)
    p.add_argument("--scaffold", default="v0", help="the scaffold arm: v<N>, champion, or a YAML file (default v0)")
    add_options(p, StructureConfig, EVALUATION_OPTIONS, MEASURE)
    add_output_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    budget = options_from_args(args, StructureConfig, EVALUATION_OPTIONS, MEASURE).budget
    seeds = shared.first_eval_seeds(args.game, budget.eval_episodes)
    scaffold = resolve_scaffold(args.game, args.scaffold, shared.STORAGE)
    print(measure_headroom(args.game, scaffold, seeds, budget.eval_max_steps, args.endpoints, budget.concurrency,
                           Path(args.out) if args.out else None))
    return 0


def measure_headroom(game: str, scaffold: Scaffold, seeds: list[int], max_steps: int, endpoints: Path,
                     concurrency: int, root: Path | None = None) -> str:
    """Play the three arms on ``seeds`` (in ``root``/<arm>, else in the project's batch folders) and return
    the table, also written to ``headroom.md`` beside the batches.

    Without ``root`` the scaffold arm is the scaffold's evaluation batch on these seeds
    (``loop.evaluation.evaluation_batch``), so a round that then evaluates the scaffold as its champion on
    the same seeds and steps reuses it rather than playing it again (``automem demo`` does)."""
    arms = {"oracle": ("oracle", 0), "none": ("window", 0), "scaffold": ("memory", 0)}

    def spec(arm: str, agent: str, window: int) -> RolloutSpec:
        if root is not None:
            return RolloutSpec(game, scaffold, seeds, max_steps, root / arm, concurrency=concurrency, agent=agent,
                               window=window, fixed_dir=True)
        if arm == "scaffold":
            return evaluation_batch(game, scaffold, seeds, max_steps, shared.STORAGE, concurrency)
        return RolloutSpec(game, scaffold, seeds, max_steps,
                           batch_dir(shared.STORAGE.runs, "headroom", game, scaffold.version, seeds, max_steps, agent,
                                     window), concurrency=concurrency, agent=agent, window=window)

    specs = {arm: spec(arm, agent, window) for arm, (agent, window) in arms.items()}

    async def go() -> tuple[dict[str, BatchSummary], dict]:
        async with session(endpoints) as (clients, progress):
            return {arm: await run_batch(spec, clients, progress) for arm, spec in specs.items()}, clients.describe()

    played, described = asyncio.run(go())
    text = headroom_table(game, f"v{scaffold.version}", played, described.get("game", {}))
    write_text_atomic((root or specs["none"].out_dir.parent.parent) / "headroom.md", text + "\n")
    return text


def headroom_table(game: str, version: str, played: dict[str, BatchSummary], actor: dict) -> str:
    """The table as markdown: each arm's progression, then the paired differences."""
    acting = "rules (rule_version {})".format(actor["rule_version"]) if actor.get("actor") == "rules" \
        else f"{actor.get('model', '?')} (temperature {actor.get('temperature')})"
    name = {"oracle": "oracle", "none": "none (window 0)", "scaffold": version}
    seeds = len(played["none"].episodes)
    lines = [f"memory's headroom in {game}: actor {acting}, {seeds} paired seeds", "",
             "| arm | progression % (mean ± se) |", "|---|---|"]
    lines += [f"| {name[arm]} | {b.progression.mean:.1f} ± {b.progression.stderr:.1f} |" for arm, b in played.items()]
    lines += ["", "| paired difference | mean (points) | 95% CI | p (one-sided) |", "|---|---|---|---|"]
    for a, b in PAIRS:
        c = compare_paired(per_seed(played[a]), per_seed(played[b]))
        lines.append(f"| {name[a]} − {name[b]} | {c.mean_difference:+.1f} | [{c.ci_low:+.1f}, {c.ci_high:+.1f}] "
                     f"| {c.p_value:.3f} |")
    lines += ["", "batches: " + json.dumps({arm: b.out_dir for arm, b in played.items()})]
    return "\n".join(lines)
