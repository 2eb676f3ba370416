"""``automem``: the command line. Every command calls the same functions the Dagster assets call."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from contextlib import asynccontextmanager
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from automem_dagster.agent.baselines import AGENTS, DEFAULT_WINDOW, WINDOWED
from automem_dagster.atomic import write_json_atomic
from automem_dagster.commands import endpoints as endpoints_command
from automem_dagster.commands import rollout_view
from automem_dagster.games import game_family
from automem_dagster.llm.client import EndpointError
from automem_dagster.llm.config import EndpointConfigError, load_endpoints
from automem_dagster.llm.process import ServerStartError
from automem_dagster.llm.session import Clients, connect
from automem_dagster.loop.proficiency import (
    ProficiencyResult,
    ProficiencySettings,
    curate_stage,
    default_curation,
    exported_adapter,
    lora_config_stage,
    run_proficiency_round,
    serving_rank_limit,
    specialist_endpoints,
)
from automem_dagster.loop.records import loss_rows, write_decision, write_rejected
from automem_dagster.loop.report import (
    RoundReport,
    agent_points,
    evaluation_run,
    report_dir,
    report_proficiency,
    report_round,
)
from automem_dagster.loop.structure import (
    RoundError,
    RoundResult,
    RoundSettings,
    Storage,
    batch_dir,
    champion_scaffold,
    decide_stage,
    diagnose_stage,
    evaluate_stage,
    resolve_scaffold,
    revise_stage,
    run_round,
    slug,
)
from automem_dagster.meta.curate import CurationError, CurationResult, DatasetTooSmall, curate
from automem_dagster.meta.decisions import ScoreWeights
from automem_dagster.meta.diagnose import Diagnosis, DiagnosisError, diagnose
from automem_dagster.meta.lora_config import validate_settings
from automem_dagster.meta.revise import propose_revision
from automem_dagster.metrics.paired import GATE_RULES, GatePolicy
from automem_dagster.paths import DEFAULT_ENDPOINTS, RUNS
from automem_dagster.plots import plot_agent_comparison
from automem_dagster.rollout import BatchSummary, RolloutError, RolloutSpec, run_batch
from automem_dagster.rollout.seeds import eval_seeds, training_seeds
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold import ScaffoldError, load_scaffold_file
from automem_dagster.scaffold.lineage import LineageError, render_tree
from automem_dagster.scaffold.model import GAME_FAMILIES
from automem_dagster.tracking import Tracker, TrackingError, default_tracking_uri
from automem_dagster.training.base_model import BaseModelError
from automem_dagster.training.registry import RegistryError
from automem_dagster.training.sft import TrainingError

DEMO_GAMES = ("crafter", "minihack:Corridor-R3", "nethack")
DEMO_MIN_EXAMPLES = 8
DEMO_TRAIN_STEPS = 4
ROUND_DEMO_GAMES = ("crafter", "minihack:Corridor-R3")
STORAGE = Storage()
COMMAND_MODULES = (endpoints_command,)
"""Commands that live in modules of their own (``automem_dagster/commands``)."""

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


def rollout_specs(args: argparse.Namespace, games: list[str]) -> list[RolloutSpec]:
    seeds = args.seeds or list(range(42, 42 + args.episodes))
    if args.seeds and args.episodes not in (None, len(seeds)):
        raise argparse.ArgumentTypeError(f"--episodes {args.episodes} does not match the {len(seeds)} seeds given")
    agent, window = getattr(args, "agent", "memory"), getattr(args, "window", DEFAULT_WINDOW)
    specs = []
    for game in games:
        scaffold = resolve_scaffold(game, args.scaffold, STORAGE)
        out = Path(args.out) / slug(game) if args.out and len(games) > 1 else args.out
        specs.append(RolloutSpec(game, scaffold, seeds, args.max_steps,
                                 Path(out) if out else batch_dir(RUNS, "rollouts", game, scaffold.version, seeds,
                                                                 args.max_steps, agent, window),
                                 concurrency=args.concurrency, agent=agent, window=window))
    return specs


def episode_progress():
    """Episode progress as one bar per batch with an ETA, episode lines in the log above the bars."""
    return rollout_view.batch_bars(console)


@asynccontextmanager
async def session(endpoints_path: Path, needs_model: bool = True):
    """Live clients and a progress callback for episodes; the embedded server is stopped on exit.

    Without ``needs_model`` (the random baseline) no endpoint is read or started and there are no clients."""
    config = load_endpoints(endpoints_path) if needs_model else None
    with episode_progress() as progress:
        if config is None:
            yield Clients(None, None, None), progress
            return
        async with connect(config, RUNS / "logs") as clients:
            yield clients, progress


async def _run_specs(specs: list[RolloutSpec], endpoints_path: Path) -> list[BatchSummary]:
    """Play ``specs`` with the one-model agent (a ``memory:`` endpoint serves only specialist evaluations)."""
    async with session(endpoints_path, needs_model=any(s.agent != "random" for s in specs)) as (clients, progress):
        return [await run_batch(spec, clients, progress) for spec in specs]


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
    retries = rollout_view.retries_table(summary)
    if retries is not None:
        Console().print(retries)
    Console().print(f"output: {summary.out_dir}")


def _add_rollout_args(p: argparse.ArgumentParser, with_game: bool) -> None:
    if with_game:
        p.add_argument("--game", required=True, help="crafter, nethack, minihack:<Task> or a MiniHack id")
    p.add_argument("--scaffold", default="v0", help="scaffold: v<N>, champion, or a YAML file (default v0)")
    p.add_argument("--episodes", type=int, default=None, help="number of episodes (seeds 42, 43, ... unless --seeds)")
    p.add_argument("--seeds", type=parse_seeds, default=None, help="seeds, e.g. 42,43 or 42-45")
    _add_common_args(p, max_steps=50)


def _add_common_args(p: argparse.ArgumentParser, max_steps: int) -> None:
    p.add_argument("--max-steps", type=int, default=max_steps, help=f"steps per episode (default {max_steps})")
    p.add_argument("--concurrency", type=int, default=2, help="episodes played at once")
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: embedded model)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: derived from the settings)")


def _add_agent_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", choices=AGENTS, default="memory",
                   help="memory (the scaffold's agent, default) or a baseline without memory: random, window, cot")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                   help=f"steps of history in context for the window and cot baselines (default {DEFAULT_WINDOW})")


def _add_round_args(p: argparse.ArgumentParser, purpose: str = "diagnose", episodes: int = 4, max_steps: int = 50) -> None:
    p.add_argument("--game", required=True, help="crafter, nethack or minihack:<Task>")
    p.add_argument("--episodes", type=int, default=episodes, help=f"training-seed episodes to {purpose} (default {episodes})")
    p.add_argument("--max-steps", type=int, default=max_steps, help=f"steps per training-seed episode (default {max_steps})")
    p.add_argument("--eval-episodes", type=int, default=None,
                   help="evaluate on the first k evaluation seeds only (default: the whole set in assets/seeds)")
    p.add_argument("--eval-max-steps", type=int, default=50, help="steps per evaluation episode (default 50)")
    p.add_argument("--concurrency", type=int, default=2, help="episodes played at once")
    p.add_argument("--attempts", type=int, default=3, help="meta-LLM attempts per diagnosis or revision (default 3)")
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: embedded model)")
    p.add_argument("--no-tracking", action="store_true", help="do not log the evaluations to MLflow")


def _add_gate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gate", choices=GATE_RULES, default="higher_mean",
                   help="keep rule: higher_mean (AutoMem's, default) or significant (a paired permutation test "
                        "must put the gain beyond chance); see README, 'Which gate'")
    p.add_argument("--gate-level", type=float, default=0.05, help="significant gate: p-value to beat (default 0.05)")
    p.add_argument("--gate-min-seeds", type=int, default=5, help="significant gate: fewest paired seeds (default 5)")


def gate_policy(args: argparse.Namespace) -> GatePolicy:
    """The round's gate from its options (commands without them: AutoMem's rule)."""
    try:
        return GatePolicy(getattr(args, "gate", "higher_mean"), getattr(args, "gate_level", 0.05),
                          getattr(args, "gate_min_seeds", 5))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}: fix --gate, --gate-level or --gate-min-seeds") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="automem", description="AutoMem-Dagster: learned agent memory as MLOps.")
    sub = parser.add_subparsers(dest="command", required=True)
    rollout = sub.add_parser("rollout", help="play episodes with a scaffold version and write trajectories")
    _add_rollout_args(rollout, with_game=True)
    rollout.add_argument("--training", action="store_true",
                         help="draw --episodes seeds from the training range (disjoint from evaluation seeds)")
    _add_agent_args(rollout)
    demo = sub.add_parser("demo", help="short rollouts on Crafter, MiniHack and NetHack, a structure-loop round on "
                                       "Crafter and MiniHack, then a proficiency round on Crafter")
    _add_rollout_args(demo, with_game=False)
    demo.set_defaults(max_steps=12)
    demo.add_argument("--no-round", action="store_true", help="only the rollouts, no structure or proficiency round")
    revise = sub.add_parser("revise", help="one structure-loop round: rollouts, diagnosis, revision, evaluation, decision")
    _add_round_args(revise)
    _add_gate_args(revise)
    diagnose_p = sub.add_parser("diagnose", help="ask the meta-LLM to diagnose a finished rollout batch")
    diagnose_p.add_argument("--game", required=True)
    diagnose_p.add_argument("--batch", type=Path, required=True, help="a rollout batch directory")
    diagnose_p.add_argument("--scaffold", default=None, help="the batch's scaffold (default: the one in batch.json)")
    _add_common_args(diagnose_p, max_steps=50)
    propose = sub.add_parser("propose", help="ask the meta-LLM for a revision of a scaffold from a diagnosis")
    propose.add_argument("--game", required=True)
    propose.add_argument("--diagnosis", type=Path, required=True, help="a diagnosis directory")
    propose.add_argument("--scaffold", default="champion", help="the parent scaffold (default: champion)")
    propose.add_argument("--register", action="store_true",
                         help="save an accepted candidate as the next version and record it in the lineage")
    _add_common_args(propose, max_steps=50)
    evaluate = sub.add_parser("evaluate", help="play a scaffold on the fixed evaluation seeds; --decide for a candidate")
    evaluate.add_argument("--game", required=True)
    evaluate.add_argument("--scaffold", default="champion", help="v<N>, champion, or a YAML file (default champion)")
    evaluate.add_argument("--eval-episodes", type=int, default=None, help="only the first k evaluation seeds")
    evaluate.add_argument("--decide", action="store_true",
                          help="also evaluate the champion, then keep or roll back this pending candidate")
    evaluate.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    _add_gate_args(evaluate)
    _add_common_args(evaluate, max_steps=50)
    _add_agent_args(evaluate)
    _add_pipeline_evaluate_args(evaluate)
    train = sub.add_parser("train", help="one proficiency-loop round: training rollouts, curation, LoRA configuration, "
                                         "training, two-model evaluation, keep or roll back")
    _add_round_args(train, purpose="curate memory decisions from", episodes=8, max_steps=100)
    _add_gate_args(train)
    train.add_argument("--min-examples", type=int, default=None,
                       help="stop below this many curated examples (default: the AutoMem paper's minimum for the game)")
    train.add_argument("--horizon", type=int, default=50, help="K: steps after a memory decision it is credited with")
    train.add_argument("--review-batches", type=int, default=10, help="meta-LLM review calls for borderline decisions")
    train.add_argument("--max-train-steps", type=int, default=None, help="cap on optimizer steps (a short local run)")
    train.add_argument("--base", default="embedded",
                       help="base model: embedded (the packaged SmolLM2) or a Hugging Face model directory")
    train.add_argument("--lora-settings", type=Path, default=None,
                       help="JSON file with LoRA settings (within bounds); the meta-LLM is then not asked")
    curate_p = sub.add_parser("curate", help="score the memory decisions of a training batch into an SFT dataset")
    curate_p.add_argument("--game", required=True)
    curate_p.add_argument("--batch", type=Path, required=True, help="a rollout batch on training seeds")
    curate_p.add_argument("--scaffold", default=None, help="the batch's scaffold (default: the one in batch.json)")
    curate_p.add_argument("--min-examples", type=int, default=None, help="minimum dataset size (default: the AutoMem paper's)")
    curate_p.add_argument("--horizon", type=int, default=50, help="K: steps after a decision it is credited with")
    curate_p.add_argument("--review-batches", type=int, default=10, help="meta-LLM review calls at most")
    curate_p.add_argument("--accept-score", type=float, default=None,
                          help="take decisions scoring at least this without review (default 1.0; 0 takes every "
                               "decision that loses no points, as the demo does for the embedded model)")
    _add_common_args(curate_p, max_steps=50)
    finetune = sub.add_parser("finetune", help="choose LoRA settings (meta-LLM) and train an adapter on a curated dataset")
    finetune.add_argument("--game", required=True)
    finetune.add_argument("--dataset", type=Path, required=True, help="a curated dataset directory")
    finetune.add_argument("--max-train-steps", type=int, default=None, help="cap on optimizer steps")
    finetune.add_argument("--base", default="embedded", help="embedded or a Hugging Face model directory")
    finetune.add_argument("--lora-settings", type=Path, default=None, help="JSON LoRA settings; skips the meta-LLM")
    finetune.add_argument("--metrics", type=Path, default=None,
                          help="where to write the run's figures as JSON (default: <out>/metrics.json)")
    finetune.add_argument("--loss-curves", type=Path, default=None,
                          help="also write train.json and validation.json (rows: step, loss) there for `dvc plots`")
    _add_common_args(finetune, max_steps=50)
    compare = sub.add_parser("compare", help="plot progression by agent (random, baselines, scaffold versions, "
                                             "specialists) from MLflow, on one seed set and step budget")
    compare.add_argument("--game", required=True)
    compare.add_argument("--eval-episodes", type=int, default=None, help="the first k evaluation seeds (default: all)")
    compare.add_argument("--max-steps", type=int, default=50, help="the step budget of the evaluations (default 50)")
    compare.add_argument("--out", type=Path, default=None, help="PNG path (default: runs/reports/<game>/agents.png)")
    lineage = sub.add_parser("lineage", help="the version tree of a game family with decisions and scores")
    lineage.add_argument("--game", required=True, help="crafter, minihack or nethack (or a minihack:<Task>)")
    for module in COMMAND_MODULES:
        module.register(sub)
    _add_decide_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) if hasattr(args, "run") else COMMANDS[args.command](args)
    except RolloutError as exc:
        report = rollout_view.failure_report(exc, argv)
        console.print(f"[red]error:[/red] {escape(report)}")
        print(report)  # on stdout too: a script or CI log that keeps only stdout still says what to do
        return 2
    except (ScaffoldError, EndpointConfigError, RoundError, DiagnosisError, LineageError, TrackingError,
            EndpointError, ValueError, argparse.ArgumentTypeError, DatasetTooSmall, CurationError, RegistryError,
            TrainingError, BaseModelError, ServerStartError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2


def cmd_rollout(args: argparse.Namespace) -> int:
    if args.episodes is None and args.seeds is None:
        args.episodes = 2 if args.command == "demo" else 4
    if getattr(args, "training", False):
        if args.seeds:
            raise argparse.ArgumentTypeError("--training draws its own seeds: give --episodes, not --seeds")
        args.seeds = training_seeds(args.game, args.episodes)
    games = [args.game] if args.command == "rollout" else list(DEMO_GAMES)
    for summary in asyncio.run(_run_specs(rollout_specs(args, games), args.endpoints)):
        print_summary(summary)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    cmd_rollout(args)
    if args.no_round:
        return 0
    for game in ROUND_DEMO_GAMES:
        settings = RoundSettings(game, rollout_episodes=2, rollout_max_steps=10, eval_max_steps=10, eval_episodes=2,
                                 concurrency=args.concurrency)
        _round(settings, args.endpoints, tracker=Tracker())
    try:
        _proficiency(demo_proficiency_settings(args.concurrency), args.endpoints, tracker=Tracker())
    except DatasetTooSmall as exc:
        # Stopping before training on too little is the loop's designed outcome, not a failure of the demo.
        console.print(f"proficiency round stopped before training: {exc}")
    print_where_to_look()
    return 0


def demo_proficiency_settings(concurrency: int) -> ProficiencySettings:
    """A short proficiency round on Crafter: enough decisions to train on for a few steps, the
    same two evaluation seeds and step budget as the demo's structure round (so the champion's
    evaluation is reused). The minimum dataset size is far below the paper's 500, and every
    decision without a penalty is taken, on purpose: the demo shows the machinery, not a
    specialist worth keeping."""
    budget = RoundSettings("crafter", rollout_episodes=2, rollout_max_steps=20, eval_max_steps=10, eval_episodes=2,
                           concurrency=concurrency)
    # The 135M model's decisions rarely score above 0 in 20 steps and its reviews are erratic, so the
    # demo takes every decision that loses no points (still deduplicated, balanced, eval seeds out).
    curation = default_curation("crafter", min_examples=DEMO_MIN_EXAMPLES, weights=ScoreWeights(horizon=10),
                                accept_score=0.0, review_floor=0.0, max_review_batches=2)
    return ProficiencySettings(budget, curation, max_train_steps=DEMO_TRAIN_STEPS)


def cmd_revise(args: argparse.Namespace) -> int:
    settings = RoundSettings(args.game, args.episodes, args.max_steps, args.eval_max_steps, args.eval_episodes,
                             args.concurrency, args.attempts, gate_policy(args))
    _round(settings, args.endpoints, tracker=None if args.no_tracking else Tracker())
    print_where_to_look()
    return 0


def _round(settings: RoundSettings, endpoints: Path, tracker: Tracker | None) -> RoundResult:
    console.rule(f"structure-loop round: {settings.game}")

    async def go() -> tuple[RoundResult, dict]:
        async with session(endpoints) as (clients, progress):
            return await run_round(settings, clients, STORAGE, progress, on_stage=lambda line: console.print(line)), \
                clients.describe()

    result, described = asyncio.run(go())
    report = report_round(result, STORAGE, tracker, described, settings.eval_max_steps)
    print_round(result, report)
    return result


def print_round(result: RoundResult, report: RoundReport) -> None:
    table = Table(title=f"{result.game}: round from champion v{result.parent}", show_header=False)
    table.add_row("outcome", result.outcome)
    if result.revision is not None:
        table.add_row("revision", ", ".join(result.revision.changes) or str(result.revision.rejected_reason))
        table.add_row("meta-LLM attempts", str(len(result.revision.attempts)))
    if result.diagnosis_dir:
        table.add_row("diagnosis", str(result.diagnosis_dir / "diagnosis.md"))
    if result.revision_dir:
        table.add_row("diff", str(result.revision_dir / "diff.md"))
    if result.decision is not None:
        table.add_row("decision", result.decision.reason)
        table.add_row("champion", f"v{result.decision.champion_before} -> v{result.decision.champion_after}")
    print_with_report(table, report)


def print_with_report(table: Table, report: RoundReport) -> None:
    """Print a round's table with the plots and MLflow runs its report produced, one row each."""
    for name, path in report.plots.items():
        table.add_row(f"plot: {name}", str(path))
    for name, run in report.runs.items():
        table.add_row(f"MLflow: {name}", run.url)
    Console().print(table)

def cmd_diagnose(args: argparse.Namespace) -> int:
    manifest = read_manifest(args.batch)
    scaffold = resolve_scaffold(args.game, args.scaffold or f"v{manifest['scaffold_version']}", STORAGE)

    async def go():
        async with session(args.endpoints) as (clients, _):
            if args.out:
                return await diagnose(args.batch, scaffold, clients.meta, args.out), args.out
            return await diagnose_stage(args.batch, scaffold, clients, STORAGE)

    result, out = asyncio.run(go())
    Console().print(f"{len(result.findings)} findings ({len(result.dropped)} dropped); diagnosis: {out / 'diagnosis.md'}")
    return 0


def cmd_propose(args: argparse.Namespace) -> int:
    parent = resolve_scaffold(args.game, args.scaffold, STORAGE)
    diagnosis = Diagnosis.load(args.diagnosis)

    async def go():
        async with session(args.endpoints) as (clients, _):
            if args.out:
                version = STORAGE.load_lineage(parent.game).next_version()
                revision = await propose_revision(parent, diagnosis.to_markdown(), args.diagnosis, clients.meta, version)
                return revision, revision.save(args.out)
            return await revise_stage(diagnosis, args.diagnosis, parent, clients, STORAGE, register=args.register)

    revision, out = asyncio.run(go())
    if not revision.accepted:
        # A rejection is a recorded outcome of the round, not a failure of the command.
        console.print(f"rejected: {revision.rejected_reason} (attempts in {out / 'revision.json'})")
        return 0
    Console().print(f"candidate v{revision.version}: {', '.join(revision.changes)}; diff: {out / 'diff.md'}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.candidate or args.specialist:
        return cmd_evaluate_into(args)
    baseline = args.agent != "memory"
    if baseline and args.decide:
        raise argparse.ArgumentTypeError(f"--decide keeps or rolls back a scaffold candidate; the {args.agent} "
                                         "baseline has none: drop --decide")
    scaffold = resolve_scaffold(args.game, args.scaffold, STORAGE)
    settings = RoundSettings(args.game, eval_max_steps=args.max_steps, eval_episodes=args.eval_episodes,
                             concurrency=args.concurrency)
    seeds = settings.eval_seed_list(STORAGE.seeds_file)

    async def go():
        async with session(args.endpoints, needs_model=args.agent != "random") as (clients, progress):
            summary = await evaluate_stage(args.game, scaffold, seeds, args.max_steps, clients, STORAGE,
                                           args.concurrency, progress, out=args.out, agent=args.agent,
                                           window=args.window)
            champion = None
            if args.decide:
                champion = await evaluate_stage(args.game, champion_scaffold(scaffold.game, STORAGE), seeds,
                                                args.max_steps, clients, STORAGE, args.concurrency, progress)
            return summary, champion, clients.describe()

    summary, champion, described = asyncio.run(go())
    print_summary(summary)
    write_json_atomic(args.metrics or Path(summary.out_dir) / "metrics.json", evaluation_metrics(summary))
    tracker = None if args.no_tracking else Tracker()
    if champion is None:
        # A scaffold given as a file has no version in the project's lineage to file the run under.
        if tracker is not None and (args.scaffold.removeprefix("v").isdigit() or args.scaffold == "champion"):
            windowed = {"window": args.window} if args.agent in WINDOWED else {}
            run = tracker.log_evaluation(evaluation_run(args.game, summary, scaffold.version,
                                                        "baseline" if baseline else "evaluation", described,
                                                        STORAGE, args.max_steps, agent=args.agent, **windowed))
            Console().print(f"MLflow: {run.url}")
        return 0
    decision = decide_stage(args.game, scaffold.version, summary, champion, STORAGE, gate_policy(args))
    result = RoundResult(args.game, decision.champion_before, scaffold.version, None, None, None, None, summary, champion,
                         decision)
    print_round(result, report_round(result, STORAGE, tracker, described, args.max_steps))
    return 0


def evaluation_metrics(summary: BatchSummary) -> dict:
    """A flat metrics file DVC can show and compare: progression and behaviour of one batch."""
    return {"progression_mean": summary.progression.mean, "progression_se": summary.progression.stderr,
            "episodes": len(summary.episodes), **summary.behaviour.as_dict()}


def cmd_lineage(args: argparse.Namespace) -> int:
    family = args.game if args.game in GAME_FAMILIES else game_family(args.game)
    lineage = STORAGE.load_lineage(family)
    Console().print(render_tree(lineage), markup=False, highlight=False)
    champion = lineage.champion()
    Console().print(f"champion: v{champion.version} since {champion.since:%Y-%m-%d %H:%M} UTC ({lineage.path})")
    return 0


def proficiency_settings(args: argparse.Namespace) -> ProficiencySettings:
    """The settings of ``train``, ``curate`` and ``finetune`` from their options (absent ones: defaults)."""
    overrides = {"weights": ScoreWeights(horizon=getattr(args, "horizon", 50)),
                 "max_review_batches": getattr(args, "review_batches", 10)}
    if getattr(args, "min_examples", None) is not None:
        overrides["min_examples"] = args.min_examples
    if getattr(args, "accept_score", None) is not None:
        overrides["accept_score"] = args.accept_score
    lora_file = getattr(args, "lora_settings", None)
    lora = validate_settings(json.loads(lora_file.read_text())) if lora_file else None
    budget = RoundSettings(args.game, getattr(args, "episodes", 4), args.max_steps, getattr(args, "eval_max_steps", 50),
                           getattr(args, "eval_episodes", None), args.concurrency, getattr(args, "attempts", 3),
                           gate_policy(args))
    return ProficiencySettings(budget, default_curation(args.game, **overrides), base=getattr(args, "base", "embedded"),
                               max_train_steps=getattr(args, "max_train_steps", None), lora=lora)


def cmd_curate(args: argparse.Namespace) -> int:
    manifest = read_manifest(args.batch)
    scaffold = resolve_scaffold(args.game, args.scaffold or f"v{manifest['scaffold_version']}", STORAGE)
    settings = proficiency_settings(args)

    async def go():
        async with session(args.endpoints) as (clients, _):
            if args.out:
                return await curate([args.batch], scaffold, eval_seeds(args.game, STORAGE.seeds_file), args.out,
                                    settings.curation, clients.meta, console.print)
            return await curate_stage(args.batch, scaffold, settings, clients.meta, STORAGE, console.print)

    result = asyncio.run(go())
    Console().print(f"{result.examples} examples, version {result.stats['dataset_hash']}: {result.out_dir}")
    return 0


def cmd_finetune(args: argparse.Namespace) -> int:
    """The DVC pipeline's training stage: LoRA settings, training and GGUF export into --out, no registry."""
    from automem_dagster.training.gguf_lora import export_gguf_lora
    from automem_dagster.training.sft import RESULT_FILE, train_adapter

    settings = proficiency_settings(args)
    stats = json.loads((args.dataset / "stats.json").read_text())
    data = CurationResult(str(args.dataset), stats["examples"], stats)
    out = args.out or args.dataset.parent / f"{args.dataset.name}-adapter"

    async def choose():
        async with session(args.endpoints) as (clients, _):
            return await lora_config_stage(data, settings, clients.meta, out / "lora_config.json",
                                           max_rank=serving_rank_limit(load_endpoints(args.endpoints)))

    choice = asyncio.run(choose())
    console.print(f"LoRA settings ({choice.source}): {choice.settings.model_dump_json()}")
    result = train_adapter(args.dataset, choice.settings, out, base=settings.base, max_steps=settings.max_train_steps)
    if settings.base == "embedded":
        export_gguf_lora(Path(result.adapter_dir), out / "adapter.gguf")
    write_json_atomic(args.metrics or out / "metrics.json", {
        "initial_validation_loss": result.initial_validation_loss, "final_validation_loss": result.final_validation_loss,
        "steps": result.global_step, "seconds_per_step": result.seconds_per_step,
        "tokens_per_second": result.tokens_per_second, "peak_rss_mb": result.peak_rss_mb})
    if args.loss_curves:
        for curve, rows in loss_rows(json.loads((out / RESULT_FILE).read_text())).items():
            write_json_atomic(args.loss_curves / f"{curve}.json", rows)
    Console().print(f"validation loss {result.initial_validation_loss:.3f} -> {result.final_validation_loss:.3f} "
                    f"after {result.global_step} steps; adapter: {result.adapter_dir}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    settings = proficiency_settings(args)
    _proficiency(settings, args.endpoints, tracker=None if args.no_tracking else Tracker())
    print_where_to_look()
    return 0


def _proficiency(settings: ProficiencySettings, endpoints: Path, tracker: Tracker | None) -> ProficiencyResult:
    console.rule(f"proficiency-loop round: {settings.game}")
    config = load_endpoints(endpoints)
    with episode_progress() as progress:
        result = asyncio.run(run_proficiency_round(settings, config, STORAGE, RUNS / "logs", progress,
                                                   on_stage=lambda line: console.print(line)))
    report = report_proficiency(result, STORAGE, tracker, settings.budget.eval_max_steps)
    print_proficiency(result, report)
    return result


def print_proficiency(result: ProficiencyResult, report: RoundReport) -> None:
    table = Table(title=f"{result.game}: LoRA memory specialist {result.adapter.id} for scaffold v{result.scaffold_version}",
                  show_header=False)
    if result.dataset is not None:
        table.add_row("dataset", f"{result.dataset.examples} examples, version {result.dataset.stats['dataset_hash']} "
                                 f"({result.dataset.out_dir})")
    if result.choice is not None:
        table.add_row("LoRA settings", f"{result.choice.source}: {result.choice.settings.model_dump_json()}")
    losses = result.training["validation_loss"]
    table.add_row("validation loss", f"{losses[0][1]:.3f} -> {losses[-1][1]:.3f} over {losses[-1][0]} steps")
    table.add_row("adapter", result.adapter.gguf or result.adapter.adapter_dir)
    if result.decision is not None:
        table.add_row("decision", result.decision.reason)
        table.add_row("specialist in service", f"{result.decision.champion_before} -> {result.decision.champion_after}")
    print_with_report(table, report)


def cmd_compare(args: argparse.Namespace) -> int:
    seeds = eval_seeds(args.game, STORAGE.seeds_file)[: args.eval_episodes or None]
    rows = Tracker().runs_for(game_family(args.game))
    points = agent_points(rows, args.game, ",".join(map(str, seeds)), args.max_steps)
    if not points:
        raise ValueError(f"MLflow has no evaluation of {args.game} on seeds {seeds} with {args.max_steps} steps: run "
                         "`automem evaluate` (with --agent for baselines) on those settings first")
    table = Table(title=f"{args.game}: progression on seeds {seeds[0]}-{seeds[-1]} (n={len(seeds)}), {args.max_steps} steps")
    for col in ("agent", "progression % (mean ± SE)"):
        table.add_column(col)
    for p in points:
        table.add_row(p.label, f"{p.mean:.1f} ± {p.se:.1f}")
    Console().print(table)
    out = args.out or report_dir(STORAGE, args.game) / "agents.png"
    plot_agent_comparison(points, f"{args.game}: progression by agent ({len(seeds)} seeds, {args.max_steps} steps)", out)
    Console().print(f"plot: {out}")
    return 0


def print_where_to_look() -> None:
    console.print(
        "\nWhere to look:\n"
        f"  lineage:   .venv/bin/automem lineage --game <game>   (files: {STORAGE.lineage})\n"
        f"  MLflow UI: .venv/bin/mlflow ui --backend-store-uri {default_tracking_uri()} --host 127.0.0.1 --port 5000\n"
        "  Dagster:   make dagster   (then open http://127.0.0.1:3000)\n"
        f"  reports:   {STORAGE.runs / 'reports'}"
    )


# --- the DVC pipeline's stages: one batch or one decision per command, into the paths given -----

def _add_pipeline_evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--candidate", type=Path, default=None,
                   help="play the candidate of a `propose --out` folder (a rejected revision: record it, play nothing)")
    p.add_argument("--specialist", type=Path, default=None,
                   help="play the two-model agent with the adapter of a `finetune --out` folder doing memory")
    p.add_argument("--metrics", type=Path, default=None, help="where to write metrics.json (default: <out>/metrics.json)")


def _add_decide_parser(sub) -> None:
    decide_p = sub.add_parser("decide", help="keep or roll back a candidate or specialist against the champion from "
                                             "two evaluation folders; writes the decision record and plot tables")
    decide_p.add_argument("--role", choices=("candidate", "specialist"), required=True)
    decide_p.add_argument("--challenger", type=Path, required=True, help="the candidate's or specialist's evaluation")
    decide_p.add_argument("--champion", type=Path, required=True, help="the champion's evaluation on the same seeds")
    decide_p.add_argument("--record", type=Path, required=True, help="decision record (JSON, flat: DVC metrics)")
    decide_p.add_argument("--progression", type=Path, required=True, help="table: progression ± SE per agent")
    decide_p.add_argument("--behaviour", type=Path, required=True, help="table: behaviour rates per agent")


def cmd_evaluate_into(args: argparse.Namespace) -> int:
    """One evaluation batch into ``--out``, as a pipeline stage needs it: no lineage, no MLflow, no
    champion lookup; ``--candidate`` with a rejected revision writes the rejection instead."""
    both = args.candidate is not None and args.specialist is not None
    if args.out is None or args.decide or args.agent != "memory" or both:
        raise argparse.ArgumentTypeError("give --out and at most one of --candidate/--specialist (each plays one "
                                         "memory-agent batch into --out), and no --decide or --agent")
    metrics = args.metrics or args.out / "metrics.json"
    if args.candidate is not None:
        if not (args.candidate / "revision.json").exists():
            raise ValueError(f"--candidate {args.candidate}: no revision.json there; run `automem propose --out` first")
        if not (args.candidate / "candidate.yaml").exists():
            marker = write_rejected(args.out, args.candidate)
            write_json_atomic(metrics, {"episodes": 0, "rejected": 1})
            Console().print(f"the revision was rejected, nothing to evaluate: {marker['rejected_reason']}")
            return 0
        scaffold = load_scaffold_file(args.candidate / "candidate.yaml")
    else:
        scaffold = resolve_scaffold(args.game, args.scaffold, STORAGE)
    config, lora = load_endpoints(args.endpoints), []
    if args.specialist is not None:
        config, lora = specialist_endpoints(config, exported_adapter(args.specialist, scaffold.version),
                                            game_family(args.game))
    seeds = RoundSettings(args.game, eval_episodes=args.eval_episodes).eval_seed_list(STORAGE.seeds_file)

    async def go() -> BatchSummary:
        async with connect(config, RUNS / "logs", lora=lora, two_model=args.specialist is not None) as clients:
            with episode_progress() as progress:
                return await evaluate_stage(args.game, scaffold, seeds, args.max_steps, clients, STORAGE,
                                            args.concurrency, progress, out=args.out)

    summary = asyncio.run(go())
    print_summary(summary)
    write_json_atomic(metrics, evaluation_metrics(summary))
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    """The DVC pipeline's decide stages: the loops' gate on two evaluation folders, as files."""
    record = write_decision(args.role, args.challenger, args.champion, args.record, args.progression, args.behaviour)
    Console().print(f"{record['outcome']}: {record['reason']}")
    return 0


COMMANDS = {"rollout": cmd_rollout, "demo": cmd_demo, "revise": cmd_revise, "diagnose": cmd_diagnose,
            "propose": cmd_propose, "evaluate": cmd_evaluate, "lineage": cmd_lineage, "train": cmd_train,
            "curate": cmd_curate, "finetune": cmd_finetune, "compare": cmd_compare, "decide": cmd_decide}


if __name__ == "__main__":
    sys.exit(main())
