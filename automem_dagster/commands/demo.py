"""``automem demo`` (``make run``): both loops at work on a game where memory decides, within minutes.

The game is key and door (``games/keydoor.py``): a sign shows once which wing holds the key, decoys
follow, and at the junction only memory can tell the way. The rule actor (``llm/rule_actor.py``)
chooses the actions from what the memory model's consultation shows, so the embedded model is
measured in the memory role, which is what both loops change (``assets/endpoints/embedded-rule-actor.yaml``;
the 135M model barely acts on a note itself, docs/memory-games.md). In order: memory's headroom
(oracle, no memory, v0 on the same seeds), one structure round decided by the gate, and one
proficiency round that curates, trains a LoRA specialist on the CPU and evaluates it against the
champion. Every budget comes from ``DEMO`` and is printed first with the full run it stands for.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from automem_dagster import tracking
from automem_dagster.commands import shared
from automem_dagster.commands.headroom import measure_headroom
from automem_dagster.commands.proficiency import proficiency_round
from automem_dagster.commands.render import console, print_where_to_look
from automem_dagster.commands.shared import add_options, options_from_args
from automem_dagster.commands.structure import structure_round
from automem_dagster.loop.gate import per_seed
from automem_dagster.loop.settings import DEMO, DEMO_STRUCTURE, ProficiencyConfig, StructureConfig
from automem_dagster.loop.storage import fresh_project_home, resolve_scaffold
from automem_dagster.loop.structure import RoundResult
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.metrics.power import detectable_gain
from automem_dagster.paths import ASSETS, RUNS
from automem_dagster.rollout.seeds import eval_seeds
from automem_dagster.training.base_model import describe_base
from automem_dagster.training.settings import default_settings


def describe_cuts() -> str:
    """What the demo cuts (``loop/settings.DEMO``), beside the full run each part stands for."""
    budget, curation, replay = DEMO.budget, DEMO.curation, DEMO.curation.replay
    endpoints = f"--endpoints {DEMO_ENDPOINTS.relative_to(ASSETS.parent)}"
    seeds, steps, episodes = budget.eval_episodes, budget.eval_max_steps, budget.rollout_episodes
    return (
        "What this demo cuts, so that it shows both loops running for real within minutes:\n"
        f"  game:        {DEMO.game} (memory decides: the key's wing is shown once, decoys follow); actor: rules,\n"
        "               the embedded model plays the memory role, writes one line a step and reads its notes\n"
        "               before each action (v0): which line it writes is its decision\n"
        f"  episodes:    {steps} steps: hall 4 asks the junction at the 5th, so 50 % = the key found, 0 % = not\n"
        "               (the door, 100 %, lies 4 steps further, where no memory decision matters)\n"
        f"  headroom:    {seeds} evaluation seeds x {steps} steps per arm\n"
        f"               (full: automem headroom --game {DEMO.game} --eval-episodes 30 --eval-max-steps 16 {endpoints})\n"
        f"  structure:   one round, rules meta: diagnose {DEMO_STRUCTURE.budget.rollout_episodes} x "
        f"{budget.rollout_max_steps} steps, decide on "
        f"{seeds} seeds\n"
        f"               (full: automem rounds --game {DEMO.game} --meta rules {endpoints})\n"
        f"  proficiency: curate {episodes} x {budget.rollout_max_steps} steps: replay the {replay.decisions} eligible "
        f"decisions with the best cheap scores\n"
        f"               (full: every one) for at most {replay.horizon} steps against {replay.floor_pairs} A/A pair "
        "and train only on those\n"
        "               whose measured effect clears the floor (as a full round does),\n"
        f"               >= {curation.min_examples} examples, {DEMO.training.max_train_steps} LoRA steps of one example, "
        f"decide on {seeds} seeds\n"
        f"               (full: automem train --game {DEMO.game} {endpoints})")


DEMO_ENDPOINTS = ASSETS / "endpoints" / "embedded-rule-actor.yaml"
DEMO_HOME = RUNS / "demo"
"""Where the demo plays: a project home of its own under the git-ignored ``runs/``, so the demo never
changes the project's versioned ``assets/`` (its candidate versions, lineage and adapter stay there)."""


def register(sub) -> None:
    demo = sub.add_parser("demo", help=f"memory's headroom in {DEMO.game}, a structure-loop round and a proficiency "
                                       "round that trains and evaluates a specialist, on small budgets")
    demo.add_argument("--endpoints", type=Path, default=DEMO_ENDPOINTS,
                      help="endpoints YAML (default: the embedded model in the memory role, the rule actor in the "
                           "game role)")
    add_options(demo, ProficiencyConfig, ("budget.concurrency",), DEMO)
    demo.add_argument("--home", type=Path, default=DEMO_HOME,
                      help="the demo's project home: its assets/ starts as a fresh copy of the project's at every "
                           "demo, its runs/ is kept (default: %(default)s)")
    demo.add_argument("--no-round", action="store_true", help="only the headroom, no structure or proficiency round")
    demo.add_argument("--meta", choices=sorted(shared.META_CHOICES), default="rules",
                      help="who diagnoses and revises in the rounds: rules (default; no model) or endpoints (the "
                           "endpoints file's meta role, e.g. the embedded LLM)")
    demo.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    shared.STORAGE = fresh_project_home(args.home)
    console.print(describe_cuts())
    console.print(f"endpoints: {args.endpoints}. Project home: {args.home} (a fresh copy of assets/; the demo writes "
                  "only there and in the git-ignored tracking and Dagster stores). Its lineage: "
                  f"AUTOMEM_HOME={args.home} automem lineage --game {DEMO.game}")
    shared.refuse_bad_round_inputs(DEMO.game, args.endpoints, args.meta)
    demo = options_from_args(args, ProficiencyConfig, ("budget.concurrency",), DEMO).for_game(DEMO.game)
    seeds = demo.eval_seed_list(shared.STORAGE.seeds_file)
    console.rule(f"memory's headroom: {DEMO.game}")
    console.print(measure_headroom(DEMO.game, resolve_scaffold(DEMO.game, "v0", shared.STORAGE), seeds,
                                   demo.budget.eval_max_steps, args.endpoints, demo.budget.concurrency))
    if args.no_round:
        return 0
    other = "endpoints" if args.meta == "rules" else "rules"
    console.print(f"meta for the rounds ({args.meta}): {shared.META_CHOICES[args.meta]}. "
                  f"Other choice, --meta {other}: {shared.META_CHOICES[other]}.")
    result = structure_round(demo_structure(demo), args.endpoints, tracker=tracking.Tracker(), meta=args.meta)
    if result.decision is not None and not result.decision.keep:
        console.print(what_a_decision_needs(result, demo))
    proficiency_round(with_demo_lora(demo), args.endpoints, tracker=tracking.Tracker(), meta=args.meta)
    print_where_to_look(shared.STORAGE)
    return 0


def demo_structure(demo: ProficiencyConfig) -> StructureConfig:
    """The structure round's config: ``DEMO_STRUCTURE`` at the concurrency this demo runs at (the one demo
    option that reaches it)."""
    budget = DEMO_STRUCTURE.budget.model_copy(update={"concurrency": demo.budget.concurrency})
    return DEMO_STRUCTURE.model_copy(update={"budget": budget}).for_game(demo.game)


def what_a_decision_needs(result: RoundResult, settings: ProficiencyConfig) -> str:
    """Beside a decision that kept nothing: the smallest gain this budget could have detected
    (``metrics.power``), and a command with a budget the significant gate can decide on."""
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
            f"instead ({why}): automem rounds --game {settings.game} --meta rules {seeds}--gate significant")


def with_demo_lora(demo: ProficiencyConfig) -> ProficiencyConfig:
    """The demo's proficiency round: the paper's LoRA defaults for the base, one example per step (a CPU step of
    4 ~1,000-token examples takes minutes, and the demo only needs the adapter trained, exported and served;
    the LoRA settings depend on the base model, so they are read here, not written in ``DEMO``)."""
    base = describe_base("embedded")
    lora = default_settings(base["hidden_size"], max_length=min(2048, base["context"]))
    return demo.with_training(lora_settings=lora.model_copy(update={"batch_size": 1}).model_dump_json())
