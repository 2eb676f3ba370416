"""``automem evaluate|compare|decide``: play on the fixed evaluation seeds, compare agents, apply the gate."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from rich.console import Console
from rich.table import Table

from automem_dagster import tracking
from automem_dagster.agent.baselines import WINDOWED
from automem_dagster.agent.memory_settings import needs_embed
from automem_dagster.atomic import write_json_atomic
from automem_dagster.commands import shared
from automem_dagster.commands.render import print_summary
from automem_dagster.commands.shared import (
    EVALUATION_OPTIONS,
    add_agent_args,
    add_game_arg,
    add_gate_args,
    add_options,
    add_output_args,
    evaluation_metrics,
    gate_policy,
    options_from_args,
    session,
)
from automem_dagster.games import game_family
from automem_dagster.loop.dvc_round import pending_adapter, pipeline_verdict
from automem_dagster.loop.evaluation import (
    evaluation_batch,
)
from automem_dagster.loop.proficiency import in_service
from automem_dagster.loop.records import pass_on_too_small, write_exports, write_rejected, write_round_champion
from automem_dagster.loop.report import (
    agent_points,
    evaluation_run,
    report_dir,
)
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import load_champion, resolve_scaffold
from automem_dagster.plots import plot_agent_comparison
from automem_dagster.rollout import run_batch
from automem_dagster.scaffold import load_scaffold, load_scaffold_file


def register(sub) -> None:
    evaluate = sub.add_parser("evaluate", help="play a scaffold (or a baseline agent) on the fixed evaluation seeds")
    add_game_arg(evaluate)
    evaluate.add_argument("--scaffold", default="champion", help="v<N>, champion, or a YAML file (default champion)")
    evaluate.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    add_evaluation_args(evaluate)
    add_agent_args(evaluate)
    add_pipeline_evaluate_args(evaluate)
    evaluate.set_defaults(run=run_evaluate)
    compare = sub.add_parser("compare", help="plot progression and per-step cost by agent (random, window, cot, rag, "
                                             "summary, scaffold versions, specialists) from MLflow, on one seed set "
                                             "and step budget")
    add_game_arg(compare)
    add_options(compare, StructureConfig, COMPARED_OPTIONS)
    compare.add_argument("--out", type=Path, default=None, help="PNG path (default: runs/reports/<game>/agents.png)")
    compare.set_defaults(run=run_compare)
    add_decide_parser(sub)


def run_evaluate(args: argparse.Namespace) -> int:
    if args.candidate or args.specialist:
        return run_evaluate_into(args)
    baseline = args.agent != "memory"
    scaffold = resolve_scaffold(args.game, args.scaffold, shared.STORAGE)
    evaluated = evaluation_budget(args)
    seeds = evaluated.eval_seed_list(shared.STORAGE.seeds_file)
    own = shared.agent_settings(args)

    async def go():
        async with session(args.endpoints, needs_model=args.agent != "random",
                           embed=needs_embed(args.agent, own)) as (clients, progress):
            budget = evaluated.budget
            spec = evaluation_batch(args.game, scaffold, seeds, budget.eval_max_steps, shared.STORAGE, budget.concurrency,
                                    out=args.out, agent=args.agent, window=args.window, settings=own)
            return await run_batch(spec, clients, progress), clients.describe()

    summary, described = asyncio.run(go())
    print_summary(summary)
    write_json_atomic(args.metrics or Path(summary.out_dir) / "metrics.json", evaluation_metrics(summary))
    # A scaffold given as a file has no version in the project's lineage to file the run under.
    if not args.no_tracking and (args.scaffold.removeprefix("v").isdigit() or args.scaffold == "champion"):
        windowed = {"window": args.window} if args.agent in WINDOWED else {}
        windowed |= {"settings": own} if own else {}
        run = tracking.Tracker().log_evaluation(evaluation_run(args.game, summary, scaffold.version,
                                                               "baseline" if baseline else "evaluation", described,
                                                               shared.STORAGE, evaluated.budget.eval_max_steps, agent=args.agent,
                                                               **windowed))
        Console().print(f"MLflow: {run.url}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    compared = options_from_args(args, StructureConfig, COMPARED_OPTIONS).for_game(args.game)
    seeds, steps = compared.eval_seed_list(shared.STORAGE.seeds_file), compared.budget.eval_max_steps
    rows = tracking.Tracker().runs_for(game_family(args.game))
    points = agent_points(rows, args.game, ",".join(map(str, seeds)), steps)
    if not points:
        raise ValueError(f"MLflow has no evaluation of {args.game} on seeds {seeds} with {steps} steps: run "
                         "`automem evaluate` (with --agent for baselines) on those settings first")
    table = Table(title=f"{args.game}: progression on seeds {seeds[0]}-{seeds[-1]} (n={len(seeds)}), {steps} steps")
    for col in ("agent", "progression % (mean ± SE)", "model calls / step", "tokens / step (in + out)", "batch identity"):
        table.add_column(col)
    for p in points:
        calls, tokens = p.costs.get("model_calls_per_step"), p.tokens_per_step
        table.add_row(p.label, f"{p.mean:.1f} ± {p.se:.1f}", "n/a" if calls is None else f"{calls:.2f}",
                      "n/a" if tokens is None else f"{tokens:.0f}", p.identity or "unknown (played before identities)")
    Console().print(table)
    out = args.out or report_dir(shared.STORAGE, args.game) / "agents.png"
    plot_agent_comparison(points, f"{args.game}: progression by agent ({len(seeds)} seeds, {steps} steps)", out)
    Console().print(f"plot: {out}")
    return 0


COMPARED_OPTIONS = ("budget.eval_episodes", "budget.eval_max_steps")
"""The evaluation budget ``compare`` reads runs of: by default a default round's evaluation."""


def add_evaluation_args(p: argparse.ArgumentParser) -> None:
    """The evaluation budget with the config's defaults and help (``StructureConfig``, as a round's
    evaluation, so a default ``evaluate`` plays a default round's evaluation batch), then endpoints and output."""
    add_options(p, StructureConfig, EVALUATION_OPTIONS)
    add_output_args(p)


def evaluation_budget(args: argparse.Namespace) -> StructureConfig:
    """The evaluation's budget: the options given, else a ``--settings`` file's, else the config's defaults."""
    return options_from_args(args, StructureConfig, EVALUATION_OPTIONS).for_game(args.game)


def add_pipeline_evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--candidate", type=Path, default=None,
                   help="play the candidate of a `propose --out` folder (a rejected revision: record it, play nothing)")
    p.add_argument("--specialist", type=Path, default=None,
                   help="play the two-model agent with the adapter of a `finetune --out` folder doing memory")
    p.add_argument("--beside-champion", type=Path, default=None,
                   help="with --candidate or --specialist: play the champion (for a specialist, the agent in service) "
                        "beside it into this folder, replayed unless its identity's A/A replays were bit-identical, "
                        "the A/A measured where none is stored")
    p.add_argument("--metrics", type=Path, default=None, help="where to write metrics.json (default: <out>/metrics.json)")


def add_decide_parser(sub) -> None:
    decide_p = sub.add_parser("decide", help="decide the round's pending candidate or specialist against the champion "
                                             "on two evaluation folders, in the lineage or the specialist registry as "
                                             "every round does; exports the decision and plot tables for DVC")
    decide_p.add_argument("--role", choices=("candidate", "specialist"), required=True,
                          help="what the challenger is: a scaffold candidate or a specialist adapter")
    decide_p.add_argument("--challenger", type=Path, required=True, help="the candidate's or specialist's evaluation")
    decide_p.add_argument("--champion", type=Path, required=True,
                          help="the champion played beside the challenger (the folder of `evaluate --beside-champion`)")
    decide_p.add_argument("--record", type=Path, required=True,
                          help="the decision flattened (JSON: DVC metrics); the record itself is runs/decisions/")
    decide_p.add_argument("--progression", type=Path, required=True, help="table: progression ± SE per agent")
    decide_p.add_argument("--behaviour", type=Path, required=True, help="table: behaviour rates per agent")
    add_gate_args(decide_p)
    decide_p.set_defaults(run=run_decide)


def run_evaluate_into(args: argparse.Namespace) -> int:
    """A challenger's evaluation into ``--out``, as a pipeline stage needs it: the challenger played beside the
    champion's arms (into ``--beside-champion``) as the CLI's and Dagster's rounds play them, no MLflow;
    ``--candidate`` with a rejected revision (``--specialist`` with no adapter trained) writes that marker into
    both folders instead."""
    both = args.candidate is not None and args.specialist is not None
    if args.out is None or args.beside_champion is None or args.agent != "memory" or both:
        raise argparse.ArgumentTypeError("give --out, --beside-champion and one of --candidate/--specialist (the "
                                         "challenger's batch goes into --out, the champion's beside it), and no --agent")
    metrics = args.metrics or args.out / "metrics.json"
    if args.candidate is not None and not (args.candidate / "revision.json").exists():
        raise ValueError(f"--candidate {args.candidate}: no revision.json there; run `automem propose --out` first")
    if args.candidate is not None and not (args.candidate / "candidate.yaml").exists():
        marker = write_rejected(args.out, args.candidate)
        write_rejected(args.beside_champion, args.candidate)
        write_json_atomic(metrics, {"episodes": 0, "rejected": 1})
        Console().print(f"the revision was rejected, nothing to evaluate: {marker['rejected_reason']}")
        return 0
    why = pass_on_too_small(args.specialist, args.out) if args.specialist is not None else None
    if why is not None:
        pass_on_too_small(args.specialist, args.beside_champion)
        write_json_atomic(metrics, {"episodes": 0, "too_small": 1})
        Console().print(f"no specialist was trained, nothing to evaluate: {why}")
        return 0
    challenger, champion, tag = pipeline_sides(args)
    evaluated = evaluation_budget(args)
    seeds = evaluated.eval_seed_list(shared.STORAGE.seeds_file)

    def spec(scaffold, out: Path):
        budget = evaluated.budget
        return evaluation_batch(args.game, scaffold, seeds, budget.eval_max_steps, shared.STORAGE, budget.concurrency,
                                out=out)

    summary, against = asyncio.run(shared.play_beside((spec(challenger[0], args.out), challenger[1]),
                                                      (spec(champion[0], args.beside_champion / "champion"), champion[1]),
                                                      tag, args.endpoints))
    write_round_champion(args.beside_champion, against)
    print_summary(summary)
    Console().print(f"champion ({against.out_dir}): {against.progression}")
    write_json_atomic(metrics, evaluation_metrics(summary))
    return 0


def pipeline_sides(args: argparse.Namespace) -> tuple[tuple, tuple, str]:
    """What a pipeline evaluation plays, each side as (scaffold, adapter or None), and the tag of the champion's
    replay: the candidate against the lineage's champion, one model each (as the structure round's
    evaluation); the pending adapter's two-model agent against the agent in service on the adapter's scaffold
    (``proficiency.in_service``: the specialist kept last, else the one-model agent), as the proficiency round's."""
    if args.candidate is not None:
        candidate = load_scaffold_file(args.candidate / "candidate.yaml")
        return (candidate, None), (load_champion(game_family(args.game), shared.STORAGE), None), f"v{candidate.version}"
    adapter = pending_adapter(shared.STORAGE, args.game)  # registered by the finetune stage, or resumed
    scaffold = load_scaffold(game_family(args.game), adapter.scaffold_version, shared.STORAGE.scaffolds)
    serving = in_service(shared.STORAGE, game_family(args.game))
    return (scaffold, adapter), (scaffold, serving), f"specialist-{adapter.id}"


def run_decide(args: argparse.Namespace) -> int:
    """The DVC pipeline's decide stages: the round's pending challenger decided on two evaluation folders
    (``dvc_round.pipeline_verdict``: the loops' one decide path), exported as files."""
    record, batches = pipeline_verdict(args.role, args.challenger, args.champion, shared.STORAGE, gate_policy(args))
    write_exports((args.record, args.progression, args.behaviour), record, batches)
    # A gate's reason opens with its outcome; a marker's (nothing played) does not.
    Console().print(record["reason"] if record["challenger"] else f"{record['outcome']}: {record['reason']}")
    return 0
