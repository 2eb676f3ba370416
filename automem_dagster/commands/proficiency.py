"""``automem train|curate|finetune``: the proficiency loop, whole or stage by stage."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from rich.console import Console

from automem_dagster import tracking
from automem_dagster.atomic import write_json_atomic
from automem_dagster.commands import shared
from automem_dagster.commands.explain import parse_target, print_arms
from automem_dagster.commands.render import (
    console,
    print_proficiency,
    print_where_to_look,
)
from automem_dagster.commands.shared import (
    CURATION_OPTIONS,
    TRAINING_OPTIONS,
    add_batch_args,
    add_game_arg,
    add_gate_args,
    add_options,
    add_output_args,
    add_round_args,
    proficiency_settings,
    session,
)
from automem_dagster.commands.worker import add_executor_args, execution_of
from automem_dagster.llm.config import endpoints_with_meta, load_endpoints
from automem_dagster.llm.session import META_ONLY, connect
from automem_dagster.loop.dvc_round import PLAYED_BY, played_by, register_trained
from automem_dagster.loop.execution import IN_PROCESS, Execution
from automem_dagster.loop.proficiency import (
    ProficiencyResult,
    curate_stage,
    curated,
    dataset_dir,
    lora_config_stage,
    train_into,
)
from automem_dagster.loop.records import TOO_SMALL, loss_rows, pass_on_resumed, pass_on_too_small, write_too_small
from automem_dagster.loop.serving import serving_rank_limit, with_training_base
from automem_dagster.loop.settings import ProficiencyConfig
from automem_dagster.loop.storage import resolve_scaffold
from automem_dagster.meta.counterfactual import CounterfactualError, explain
from automem_dagster.meta.curate import DatasetTooSmall
from automem_dagster.rollout.trajectory import read_manifest, trajectory_path
from automem_dagster.training.sft_result import FIGURES, RESULT_FILE


def register(sub) -> None:
    train = sub.add_parser("train", help="one whole proficiency-loop round: training rollouts, curation, LoRA "
                                         "configuration, training, two-model evaluation, keep or roll back "
                                         "(finetune is the training stage alone)")
    add_round_args(train, ProficiencyConfig)
    add_gate_args(train)
    add_options(train, ProficiencyConfig, CURATION_OPTIONS)
    add_training_args(train)
    add_executor_args(train)
    train.set_defaults(run=run_train)
    curate = sub.add_parser("curate", help="score the memory decisions of a training batch into an SFT dataset")
    add_batch_args(curate, "a rollout batch on training seeds")
    add_options(curate, ProficiencyConfig, CURATION_OPTIONS)
    curate.add_argument("--explain", type=parse_target, default=None, metavar="EPISODE:STEP",
                        help="replay the memory decisions at this step of this episode of --batch and print their "
                             "two arms side by side (nothing is curated)")
    add_output_args(curate)
    curate.set_defaults(run=run_curate)
    finetune = sub.add_parser("finetune", help="the training stage alone: choose LoRA settings (meta-LLM) and train an "
                                               "adapter on a curated dataset (train runs the whole round)")
    add_game_arg(finetune)
    finetune.add_argument("--dataset", type=Path, required=True, help="a curated dataset directory")
    add_training_args(finetune)
    finetune.add_argument("--register", action="store_true",
                          help="record the trained adapter in the specialist registry, pending (as a round's training "
                               "does; the DVC finetune stage)")
    finetune.add_argument("--metrics", type=Path, default=None,
                          help="where to write the run's figures as JSON (default: <out>/metrics.json)")
    finetune.add_argument("--loss-curves", type=Path, default=None,
                          help="also write train.json and validation.json (rows: step, loss) there for `dvc plots`")
    add_output_args(finetune)
    finetune.set_defaults(run=run_finetune)


def add_training_args(p: argparse.ArgumentParser) -> None:
    add_options(p, ProficiencyConfig, TRAINING_OPTIONS)
    p.add_argument("--lora-settings", type=Path, default=None,
                   help="JSON file with LoRA settings (within bounds); the meta-LLM is then not asked")


def run_train(args: argparse.Namespace) -> int:
    settings = proficiency_settings(args)
    proficiency_round(settings, args.endpoints, tracker=None if args.no_tracking else tracking.Tracker(),
                      execution=execution_of(args))
    print_where_to_look(shared.STORAGE)
    return 0


def proficiency_round(settings: ProficiencyConfig, endpoints: Path, tracker: tracking.Tracker | None,
                      meta: str = "endpoints", execution: Execution = IN_PROCESS) -> ProficiencyResult | None:
    """One whole round, as a Dagster run (``defs/cli_rounds.py``) executed as ``execution`` says (default: in
    this process); prints its table and where the run shows. A dataset below the minimum is the round's
    designed end before training: one line says so and there is no result (None)."""
    shared.refuse_bad_round_inputs(settings.game, endpoints, meta, settings.training.base)
    console.rule(f"proficiency-loop round: {settings.game}")
    try:
        result, report, shown = shared.dagster_rounds().run_proficiency_round(settings, endpoints, shared.STORAGE,
                                                                               tracker, meta, execution)
    except DatasetTooSmall as exc:
        console.print(f"proficiency round ended before training, as designed: {exc}")
        return None
    print_proficiency(result, report)
    console.print(shown)
    return result


def run_curate(args: argparse.Namespace) -> int:
    if args.out is not None and pass_on_resumed(args.batch, args.out):
        Console().print(f"{args.batch}: the round resumes a pending adapter, nothing to curate (passed on)")
        return 0
    manifest = read_manifest(args.batch)
    scaffold = resolve_scaffold(args.game, args.scaffold or f"v{manifest['scaffold_version']}", shared.STORAGE)
    settings = proficiency_settings(args)
    if args.explain is not None:
        return run_explain(args, scaffold, settings)
    out = args.out or dataset_dir(shared.STORAGE, args.batch)

    async def go():
        replaying = settings.curation.replay.decisions != 0
        async with players(args.endpoints, manifest, replaying) as clients:
            return await curate_stage(args.batch, scaffold, settings, clients.meta, shared.STORAGE, console.print, out,
                                      players=clients if replaying else None)

    try:
        result = asyncio.run(go())
    except DatasetTooSmall as exc:
        # An outcome of the round, as in the CLI's round (which stops before training): recorded, so
        # the pipeline's training, evaluation and decision say so instead of failing.
        write_too_small(out, str(exc))
        Console().print(f"nothing to train (recorded in {out / TOO_SMALL}): {exc}")
        return 0
    (out / TOO_SMALL).unlink(missing_ok=True)
    write_json_atomic(out / PLAYED_BY, {"scaffold_version": scaffold.version})  # what finetune --register records
    Console().print(f"{result.examples} examples, version {result.stats['dataset_hash']}: {result.out_dir}")
    return 0


def players(endpoints: Path, manifest: dict, replaying: bool = True):
    """The clients of the endpoints that play a batch again for a counterfactual replay: with the memory
    role's client where the batch was played by two models (``batch.json``'s ``two_model``). Without a
    replay only the meta role is connected, as in the Dagster round, so no game model is started."""
    return connect(endpoints_with_meta(endpoints), shared.STORAGE.runs / "logs", two_model=bool(manifest.get("two_model")),
                   roles=None if replaying else META_ONLY)


def run_explain(args: argparse.Namespace, scaffold, settings: ProficiencyConfig) -> int:
    """``--explain EPISODE:STEP``: the decisions at that step, each with its arms, printed side by side."""
    episode, step = args.explain
    path = trajectory_path(args.batch, episode)
    if not path.exists():
        Console().print(f"--explain: no finished episode {episode!r} in {args.batch / 'trajectories'}: use an episode "
                        "as decisions.jsonl names it")
        return 2

    curation = settings.curation_settings()

    async def go():
        async with players(args.endpoints, read_manifest(args.batch)) as clients:
            return await explain(path, scaffold, step, clients, curation.replay, curation.weights)

    try:
        replayed = asyncio.run(go())
    except CounterfactualError as exc:
        Console().print(f"--explain: {exc}")
        return 2
    for decision, effect in replayed:
        print_arms(decision, effect)
    return 0


def run_finetune(args: argparse.Namespace) -> int:
    """The DVC pipeline's training stage: LoRA settings, training and GGUF export into --out; with --register,
    the adapter is registered as pending, as the round's training stage registers it."""
    settings = with_training_base(proficiency_settings(args), load_endpoints(args.endpoints))
    out = args.out or args.dataset.parent / f"{args.dataset.name}-adapter"
    why = pass_on_too_small(args.dataset, out)
    again = pass_on_resumed(args.dataset, out)
    if why is not None or again is not None:
        write_json_atomic(args.metrics or out / "metrics.json", {"too_small": 1} if why else {"resumed": 1})
        write_loss_curves(args.loss_curves, {})
        Console().print(f"nothing to train: {why}" if why else
                        f"nothing to train: the round resumes the pending adapter {again['challenger']}")
        return 0
    data = curated(args.dataset)

    async def choose():
        async with session(args.endpoints) as (clients, _):
            return await lora_config_stage(data, settings, clients.meta, out / "lora_config.json",
                                           max_rank=serving_rank_limit(load_endpoints(args.endpoints)))

    choice = asyncio.run(choose())
    console.print(f"LoRA settings ({choice.source}): {choice.settings.model_dump_json()}")
    result, _ = train_into(data, choice, settings, out)
    write_json_atomic(args.metrics or out / "metrics.json", {
        "initial_validation_loss": result.initial_validation_loss, "final_validation_loss": result.final_validation_loss,
        "steps": result.global_step, **{key: getattr(result, key) for key in FIGURES}})
    write_loss_curves(args.loss_curves, json.loads((out / RESULT_FILE).read_text()))
    Console().print(f"validation loss {result.initial_validation_loss:.3f} -> {result.final_validation_loss:.3f} "
                    f"after {result.global_step} steps; adapter: {result.adapter_dir}")
    if args.register:
        record = register_trained(shared.STORAGE, args.game, out, played_by(args.dataset))
        Console().print(f"registered as adapter {record.id}, pending its decision ({record.adapter_dir})")
    return 0


def write_loss_curves(folder: Path | None, training: dict) -> None:
    """``--loss-curves``: the run's train and validation losses (``loss_rows``; empty tables when nothing
    was trained) as ``train.json`` and ``validation.json`` in ``folder``, for ``dvc plots``."""
    if folder is None:
        return
    for curve, rows in loss_rows(training).items():
        write_json_atomic(folder / f"{curve}.json", rows)
