"""``automem demo`` (``make run``): short rollouts on every game, then one round of each loop."""

from __future__ import annotations

import argparse
from pathlib import Path

from automem_dagster import tracking
from automem_dagster.commands import shared
from automem_dagster.commands.proficiency import proficiency_round
from automem_dagster.commands.render import console, print_where_to_look
from automem_dagster.commands.rollout import add_rollout_args, play
from automem_dagster.commands.structure import structure_round
from automem_dagster.loop.gate import per_seed
from automem_dagster.loop.settings import ProficiencySettings, RoundSettings, default_curation
from automem_dagster.loop.storage import fresh_project_home
from automem_dagster.loop.structure import RoundResult
from automem_dagster.meta.curate import DatasetTooSmall
from automem_dagster.meta.decisions import ScoreWeights
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.metrics.power import detectable_gain
from automem_dagster.paths import RUNS
from automem_dagster.rollout.seeds import eval_seeds
from automem_dagster.training.base_model import describe_base
from automem_dagster.training.settings import default_settings

DEMO_GAMES = ("crafter", "minihack:Corridor-R3", "nethack")
DEMO_MIN_EXAMPLES = 8
DEMO_TRAIN_STEPS = 3
DEMO_BATCH_SIZE = 1
DEMO_CUTS = (
    "What this demo cuts, so that it shows every loop running for real within minutes:\n"
    "  rollouts:    2 episodes x 6 steps per game, one at a time (faster on 2 cores)\n"
    "               (full: automem rollout --game <game> --episodes 4 --max-steps 50)\n"
    "  structure:   one round on Crafter: diagnose 2 x 6 steps, decide on 2 evaluation seeds x 6 steps, rules meta\n"
    "               (full: automem revise --game <game> --episodes 4 --max-steps 50 --eval-episodes "" --eval-max-steps 50)\n"
    f"  proficiency: 2 training episodes x 12 steps, >= {DEMO_MIN_EXAMPLES} examples, {DEMO_TRAIN_STEPS} LoRA steps of "
    f"batch {DEMO_BATCH_SIZE},\n"
    "               validated before the first step and after the last\n"
    "               (full: automem train --game crafter --episodes 8 --max-steps 100 --eval-episodes "" --min-examples "" ...)"
)
ROUND_DEMO_GAMES = ("crafter",)
DEMO_HOME = RUNS / "demo"
"""Where the demo plays: a project home of its own under the git-ignored ``runs/``, so the demo never
changes the project's versioned ``assets/`` (its candidate versions, lineage and adapter stay there)."""


def register(sub) -> None:
    demo = sub.add_parser("demo", help="short rollouts on Crafter, MiniHack and NetHack, a structure-loop round on "
                                       "Crafter, then a proficiency round on Crafter")
    add_rollout_args(demo, with_game=False)
    demo.set_defaults(max_steps=6, concurrency=1, run=run)
    demo.add_argument("--home", type=Path, default=DEMO_HOME,
                      help="the demo's project home: its assets/ starts as a fresh copy of the project's at every "
                           "demo, its runs/ is kept (default: %(default)s)")
    demo.add_argument("--no-round", action="store_true", help="only the rollouts, no structure or proficiency round")
    demo.add_argument("--meta", choices=sorted(shared.META_CHOICES), default="rules",
                      help="who diagnoses and revises in the rounds: rules (default; no model) or endpoints (the "
                           "endpoints file's meta role, e.g. the embedded LLM)")


def run(args: argparse.Namespace) -> int:
    if args.episodes is None and args.seeds is None:
        args.episodes = 2
    shared.STORAGE = fresh_project_home(args.home)
    console.print(DEMO_CUTS)
    console.print(f"project home: {args.home} (a fresh copy of assets/; the demo writes only there, under runs/ and "
                  "in the git-ignored tracking and Dagster stores). Its lineage: "
                  f"AUTOMEM_HOME={args.home} automem lineage --game crafter")
    play(args, list(DEMO_GAMES))
    if args.no_round:
        return 0
    other = "endpoints" if args.meta == "rules" else "rules"
    console.print(f"meta for the rounds ({args.meta}): {shared.META_CHOICES[args.meta]}. "
                  f"Other choice, --meta {other}: {shared.META_CHOICES[other]}.")
    for game in ROUND_DEMO_GAMES:
        settings = RoundSettings(game, rollout_episodes=2, rollout_max_steps=6, eval_max_steps=6, eval_episodes=2,
                                 concurrency=args.concurrency)
        result = structure_round(settings, args.endpoints, tracker=tracking.Tracker(), meta=args.meta)
        if result.decision is not None and not result.decision.keep:
            console.print(what_a_decision_needs(result, settings))
    try:
        proficiency_round(demo_proficiency_settings(args.concurrency), args.endpoints, tracker=tracking.Tracker(),
                          meta=args.meta)
    except DatasetTooSmall as exc:
        # Stopping before training on too little is the loop's designed outcome, not a failure of the demo.
        console.print(f"proficiency round stopped before training: {exc}")
    print_where_to_look(shared.STORAGE)
    return 0


def what_a_decision_needs(result: RoundResult, settings: RoundSettings) -> str:
    """Beside a decision that kept nothing (on the demo's 2 seeds: inconclusive): the smallest gain this
    budget could have detected (``metrics.power``), and a command with a budget the significant gate can
    decide on."""
    strict = detectable_gain(per_seed(result.candidate_eval), per_seed(result.champion_eval), GatePolicy("significant"))
    available = len(eval_seeds(settings.game, shared.STORAGE.seeds_file))
    needed = strict.seeds_for.get("10")
    if needed is None:
        why = (f"a spread shows only in longer episodes; all {available} evaluation seeds let the significant gate "
               f"reach p {2.0 ** -available:.3f}")
    elif needed > available:
        why = f"at this spread a 10-point gain needs {needed} seeds, more than the {available} evaluation seeds"
    else:
        why = f"at this spread {needed} seeds detect a 10-point gain with the significant gate"
    seeds = f"--eval-episodes {needed} " if needed and needed <= available else ""
    return (f"What this decision could have seen: {result.decision.detectable['summary']}. To measure a gain "
            f"instead ({why}): automem rounds --game {settings.game} --meta rules {seeds}--eval-max-steps 100 "
            "--gate significant")


def demo_proficiency_settings(concurrency: int) -> ProficiencySettings:
    """A short proficiency round on Crafter: enough decisions to train on for a few steps, the
    same two evaluation seeds and step budget as the demo's structure round (so the champion's
    evaluation and the noise floor it measured are reused; the champion is played again beside the
    specialist unless that floor's replays were bit-identical). The minimum dataset size is far below the paper's 500, and every
    decision without a penalty is taken, on purpose: the demo shows the machinery, not a
    specialist worth keeping."""
    budget = RoundSettings("crafter", rollout_episodes=2, rollout_max_steps=12, eval_max_steps=6, eval_episodes=2,
                           concurrency=concurrency)
    # The 135M model's decisions rarely score above 0 in 12 steps and its reviews are erratic, so the
    # demo takes every eligible decision that loses no points (credited, with a full window of 4
    # steps, which 12-step episodes leave to 9 of their steps; still deduplicated, balanced, eval
    # seeds out).
    # The default counterfactual replay (4 decisions, K = 8, 1 pair) stays on: on the embedded model this
    # round has reached 0 eligible decisions, so it replays none, costs nothing and its card says there are
    # not enough replayed decisions; where some are eligible, it plays at most 4 x 2 x 8 steps, cost printed.
    curation = default_curation("crafter", min_examples=DEMO_MIN_EXAMPLES, weights=ScoreWeights(horizon=4),
                                accept_score=0.0, review_floor=0.0, max_review_batches=2)
    # The paper's LoRA defaults for the base, one example per step: a CPU step of 4 ~1,000-token
    # examples takes minutes, and the demo only needs the adapter trained, exported and served.
    base = describe_base("embedded")
    lora = default_settings(base["hidden_size"], max_length=min(2048, base["context"]))
    # Validation before the first step and after the last only: a pass costs twice a CPU step here.
    return ProficiencySettings(budget, curation, max_train_steps=DEMO_TRAIN_STEPS,
                               lora=lora.model_copy(update={"batch_size": DEMO_BATCH_SIZE}),
                               eval_every=DEMO_TRAIN_STEPS)
