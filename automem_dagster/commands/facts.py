"""``automem facts``: how often the memory model writes a memory game's needed facts down when the game
shows them, the base model against specialists, on the same evaluation seeds (issue 53, point 4).

Progression tells whether a specialist's agent won more; this tells whether its memory model did
the part a specialist is trained for, whatever the actor made of it. Each arm plays the first N
evaluation seeds just long enough for every needed fact to be shown and LOGged
(``meta.fact_notes.fact_horizon``: two steps in key and door), so a measure on 30 seeds costs a few
calls an episode. ``base`` plays with the endpoints file as it is (under the rule actor,
``assets/endpoints/embedded-rule-actor.yaml``, the base model is the memory model; under a model
actor it is the one-model agent in service); each ``--specialist`` is served in the memory role as
the proficiency loop serves it (``serving.specialist_endpoints``). The table gives facts written over
facts shown, each arm's mean ± standard error over seeds, and each specialist's paired difference
from the base (``metrics.paired.compare_paired``: bootstrap interval, one-sided permutation p).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from automem_dagster.atomic import write_text_atomic
from automem_dagster.commands import shared
from automem_dagster.commands.shared import add_game_arg, add_options, add_output_args, options_from_args, play_as
from automem_dagster.games import game_family
from automem_dagster.loop.proficiency import exported_adapter, registry
from automem_dagster.loop.settings import MEASURE, StructureConfig
from automem_dagster.loop.storage import batch_dir, resolve_scaffold
from automem_dagster.meta.fact_notes import FactRate, batch_fact_rate, fact_horizon
from automem_dagster.metrics.paired import compare_paired
from automem_dagster.rollout import RolloutSpec
from automem_dagster.scaffold import Scaffold
from automem_dagster.training.registry import AdapterRecord

BASE = "base"
FACTS_OPTIONS = ("budget.eval_episodes", "budget.concurrency")
"""The budget ``facts`` reads: its steps are each game's fact horizon (``meta.fact_notes.fact_horizon``)."""


def register(sub) -> None:
    p = sub.add_parser("facts", help="how often the memory model writes a memory game's needed facts down when "
                                     "they are shown: the base model against specialists, on evaluation seeds")
    add_game_arg(p)
    p.add_argument("--specialist", action="append", default=[], metavar="ADAPTER",
                   help="a `finetune --out` folder or an adapter id of the specialist registry (e.g. a1); repeat "
                        "for several; none: the base model alone")
    p.add_argument("--scaffold", default="v0", help="the scaffold played: v<N>, champion, or a YAML file (default v0)")
    add_options(p, StructureConfig, FACTS_OPTIONS, MEASURE)
    add_output_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    budget = options_from_args(args, StructureConfig, FACTS_OPTIONS, MEASURE).budget
    seeds = shared.first_eval_seeds(args.game, budget.eval_episodes)
    scaffold = resolve_scaffold(args.game, args.scaffold, shared.STORAGE)
    steps = fact_horizon(args.game, seeds)
    arms: dict[str, AdapterRecord | None] = {BASE: None}
    for ref in args.specialist:
        record = specialist(ref, args.game, scaffold)
        name = Path(ref).name if Path(ref).is_dir() else record.id
        if name in arms:
            raise argparse.ArgumentTypeError(f"--specialist {ref}: another arm is already named {name!r}; give "
                                             "adapters whose folders have different names")
        arms[name] = record
    root = Path(args.out) if args.out else batch_dir(shared.STORAGE.runs, "facts", args.game, scaffold.version, seeds,
                                                     steps)
    rates = {}
    for arm, record in arms.items():
        spec = RolloutSpec(args.game, scaffold, seeds, steps, root / arm, budget.concurrency, fixed_dir=True)
        asyncio.run(play_as(spec, args.endpoints, record))
        rates[arm] = batch_fact_rate(root / arm)
    text = facts_table(args.game, f"v{scaffold.version}", args.endpoints, rates, root)
    print(text)
    write_text_atomic(root / "facts.md", text + "\n")
    return 0


def specialist(ref: str, game: str, scaffold: Scaffold) -> AdapterRecord:
    """The adapter ``ref`` names: a trained folder (``finetune --out``) or an id of ``game``'s registry."""
    if Path(ref).is_dir():
        return exported_adapter(Path(ref), scaffold.version)
    return registry(shared.STORAGE, game_family(game)).record(ref)


def facts_table(game: str, version: str, endpoints: Path, rates: dict[str, FactRate], root: Path) -> str:
    """The table as markdown: each arm's facts written, then each specialist's paired difference from the base."""
    seeds = len(rates[BASE].per_seed)
    lines = [f"needed facts written when shown in {game}: scaffold {version}, endpoints {endpoints}, {seeds} seeds", "",
             "| arm | facts written / shown | rate % (mean ± se over seeds) |", "|---|---|---|"]
    lines += [f"| {arm} | {r.written}/{r.shown} | {r.summary.mean:.1f} ± {r.summary.stderr:.1f} |"
              for arm, r in rates.items()]
    if len(rates) > 1:
        lines += ["", "| paired difference | mean (points) | 95% CI | p (one-sided) |", "|---|---|---|---|"]
        for arm, r in rates.items():
            if arm != BASE:
                c = compare_paired(r.per_seed, rates[BASE].per_seed)
                lines.append(f"| {arm} − {BASE} | {c.mean_difference:+.1f} | [{c.ci_low:+.1f}, {c.ci_high:+.1f}] "
                             f"| {c.p_value:.2g} |")
    lines += ["", "batches: " + json.dumps({arm: str(root / arm) for arm in rates})]
    return "\n".join(lines)
