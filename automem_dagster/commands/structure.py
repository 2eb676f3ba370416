"""``automem revise|rounds|diagnose|propose|lineage``: the structure loop, a round, rounds back to back, or stage
by stage."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from rich.console import Console

from automem_dagster import tracking
from automem_dagster.commands import shared
from automem_dagster.commands.proficiency import proficiency_round
from automem_dagster.commands.render import console, print_round, print_where_to_look
from automem_dagster.commands.shared import (
    add_batch_args,
    add_game_arg,
    add_gate_args,
    add_options,
    add_output_args,
    add_round_args,
    options_from_args,
    round_settings,
    session,
)
from automem_dagster.commands.worker import add_executor_args, execution_of
from automem_dagster.games import families, game_family
from automem_dagster.loop.dvc_round import write_resumed_revision
from automem_dagster.loop.execution import IN_PROCESS, Execution
from automem_dagster.loop.records import pass_on_resumed, resumed
from automem_dagster.loop.rounds import RoundsResult, run_rounds
from automem_dagster.loop.settings import ProficiencyConfig, RoundsPlan, StructureConfig
from automem_dagster.loop.storage import resolve_scaffold
from automem_dagster.loop.structure import RoundResult, diagnose_stage, revise_stage
from automem_dagster.meta.diagnose import Diagnosis
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold.lineage import render_tree


def register(sub) -> None:
    revise = sub.add_parser("revise", help="one whole structure-loop round: rollouts, diagnosis, revision, evaluation, "
                                           "decision (propose is the revision stage alone)")
    add_round_args(revise)
    add_gate_args(revise)
    add_executor_args(revise)
    revise.set_defaults(run=run_revise)
    rounds = sub.add_parser("rounds", help="structure rounds back to back from the champion until --patience rounds in "
                                           "a row keep nothing or --max-rounds, then optionally a proficiency round")
    add_round_args(rounds)
    add_gate_args(rounds)
    add_executor_args(rounds)
    add_options(rounds, RoundsPlan, ("max_rounds", "patience"))
    rounds.add_argument("--meta", choices=sorted(shared.META_CHOICES), default="endpoints",
                        help="who diagnoses and revises: endpoints (the endpoints file's meta role, default) or rules")
    rounds.add_argument("--proficiency", action="store_true",
                        help="then one proficiency round on the final champion, on the same rollout and evaluation budget")
    add_options(rounds, ProficiencyConfig, ("curation.min_examples",))
    rounds.set_defaults(run=run_rounds_command)
    diagnose = sub.add_parser("diagnose", help="ask the meta-LLM to diagnose a finished rollout batch")
    add_batch_args(diagnose, "a rollout batch directory")
    add_output_args(diagnose)
    diagnose.set_defaults(run=run_diagnose)
    propose = sub.add_parser("propose", help="the revision stage alone: ask the meta-LLM for a revision of a scaffold "
                                             "from a diagnosis (revise runs the whole round)")
    add_game_arg(propose)
    propose.add_argument("--diagnosis", type=Path, required=True, help="a diagnosis directory")
    propose.add_argument("--scaffold", default="champion", help="the parent scaffold (default: champion)")
    propose.add_argument("--register", action="store_true",
                         help="save an accepted candidate as the next version and record it in the lineage, pending "
                              "(as a round's revision does; the DVC revise stage)")
    add_output_args(propose)
    propose.set_defaults(run=run_propose)
    lineage = sub.add_parser("lineage", help="the version tree of a game family with decisions and scores")
    lineage.add_argument("--game", required=True, help="crafter, minihack or nethack (or a minihack:<Task>)")
    lineage.set_defaults(run=run_lineage)


def run_revise(args: argparse.Namespace) -> int:
    settings = round_settings(args)
    structure_round(settings, args.endpoints, tracker=None if args.no_tracking else tracking.Tracker(),
                    execution=execution_of(args))
    print_where_to_look(shared.STORAGE)
    return 0


def run_rounds_command(args: argparse.Namespace) -> int:
    """The rounds, then with ``--proficiency`` a proficiency round. Everything they read is read first (the
    proficiency round's settings too): a bad one is refused before the first round, not after the last."""
    settings = round_settings(args)
    then = shared.proficiency_settings(args) if args.proficiency else None
    shared.refuse_bad_round_inputs(settings.game, args.endpoints, args.meta, then.training.base if then else None)
    tracker, execution = None if args.no_tracking else tracking.Tracker(), execution_of(args)
    done = run_rounds(settings, options_from_args(args, RoundsPlan),
                      lambda each: structure_round(each, args.endpoints, tracker, args.meta, execution),
                      shared.STORAGE, say=lambda line: console.rule(line))
    print_rounds(done)
    if then is not None:
        proficiency_round(then, args.endpoints, tracker, args.meta, execution)
    print_where_to_look(shared.STORAGE)
    return 0


def print_rounds(done: RoundsResult) -> None:
    """One line per round: its training seeds, candidate, outcome and the smallest gain its gate could have
    detected; then why the rounds stopped."""
    for number, (played, block) in enumerate(zip(done.rounds, done.blocks, strict=True), start=1):
        seeds = sorted(e.seed for e in played.rollout.episodes) if played.rollout else "resumed, none played"
        seen = f" ({played.decision.detectable['summary']})" if played.decision and played.decision.detectable else ""
        console.print(f"round {number}: block {block}, training seeds {seeds}, candidate "
                      f"{'v' + str(played.candidate) if played.candidate else 'none'}: {played.outcome}{seen}")
    console.print(f"stopped: {done.stopped}; {done.kept} of {len(done.rounds)} rounds kept a candidate")


def structure_round(settings: StructureConfig, endpoints: Path, tracker: tracking.Tracker | None,
                    meta: str = "endpoints", execution: Execution = IN_PROCESS) -> RoundResult:
    """One whole round, as a Dagster run (``defs/cli_rounds.py``) executed as ``execution`` says (default: in
    this process); prints its table and where the run shows."""
    shared.refuse_bad_round_inputs(settings.game, endpoints, meta)
    console.rule(f"structure-loop round: {settings.game}")
    result, report, shown = shared.dagster_rounds().run_structure_round(settings, endpoints, shared.STORAGE, tracker,
                                                                         meta, execution)
    print_round(result, report)
    console.print(shown)
    return result


def run_diagnose(args: argparse.Namespace) -> int:
    if args.out is not None and pass_on_resumed(args.batch, args.out):
        console.print(f"{args.batch}: the round resumes a pending candidate, nothing to diagnose (passed on)")
        return 0
    manifest = read_manifest(args.batch)
    scaffold = resolve_scaffold(args.game, args.scaffold or f"v{manifest['scaffold_version']}", shared.STORAGE)

    async def go():
        async with session(args.endpoints) as (clients, _):
            return await diagnose_stage(args.batch, scaffold, clients, shared.STORAGE, out=args.out)

    result, out = asyncio.run(go())
    Console().print(f"{len(result.findings)} findings ({len(result.dropped)} dropped); diagnosis: {out / 'diagnosis.md'}")
    return 0


def run_propose(args: argparse.Namespace) -> int:
    again = resumed(args.diagnosis)
    if again is not None and args.out is not None:
        write_resumed_revision(shared.STORAGE, game_family(args.game), again["challenger"], args.out)
        console.print(f"the round resumes the pending candidate v{again['challenger']}: {args.out / 'candidate.yaml'}")
        return 0
    parent = resolve_scaffold(args.game, args.scaffold, shared.STORAGE)
    diagnosis = Diagnosis.load(args.diagnosis)

    async def go():
        async with session(args.endpoints) as (clients, _):
            return await revise_stage(diagnosis, args.diagnosis, parent, clients, shared.STORAGE,
                                      register=args.register, out=args.out)

    revision, out = asyncio.run(go())
    if not revision.accepted:
        # A rejection is a recorded outcome of the round, not a failure of the command.
        console.print(f"rejected: {revision.rejected_reason} (attempts in {out / 'revision.json'})")
        return 0
    Console().print(f"candidate v{revision.version}: {', '.join(revision.changes)}; diff: {out / 'diff.md'}")
    return 0


def run_lineage(args: argparse.Namespace) -> int:
    family = args.game if args.game in families() else game_family(args.game)
    lineage = shared.STORAGE.load_lineage(family)
    Console().print(render_tree(lineage), markup=False, highlight=False)
    champion = lineage.champion()
    Console().print(f"champion: v{champion.version} since {champion.since:%Y-%m-%d %H:%M} UTC ({lineage.path})")
    return 0
