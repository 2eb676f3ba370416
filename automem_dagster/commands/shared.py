"""What several commands share: where they store, how they connect, their common options and settings."""

from __future__ import annotations

import argparse
import importlib
from contextlib import asynccontextmanager
from pathlib import Path

from automem_dagster.agent.baselines import AGENTS, DEFAULT_WINDOW
from automem_dagster.agent.memory_settings import RECORD_FIELDS, RETRIEVERS, RagSettings, SummarySettings, settings_for
from automem_dagster.commands.render import episode_progress
from automem_dagster.llm.config import endpoints_with_meta
from automem_dagster.llm.session import Clients, connect
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.settings import ProficiencySettings, RoundSettings
from automem_dagster.loop.settings import proficiency_settings as build_proficiency_settings
from automem_dagster.loop.storage import Storage
from automem_dagster.metrics.paired import GATE_METRICS, GATE_RULES, GatePolicy
from automem_dagster.paths import DEFAULT_ENDPOINTS, RUNS
from automem_dagster.rollout import BatchSummary

STORAGE = Storage()
"""Where the commands read and write (tests point it at a temporary folder)."""


def defs_module(name: str):
    """``automem_dagster.defs.<name>``, or None where the ``dagster`` extra is not installed (docs/install.md).
    Imported only when a command needs it: Dagster takes seconds to load."""
    try:
        return importlib.import_module(f"automem_dagster.defs.{name}")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("dagster"):
            raise
        return None


def dagster_rounds():
    """``defs/cli_rounds``, which runs a whole round as a Dagster run in this process (so the UI shows it as
    the run it was). Without the dagster extra a whole round is refused with what to do instead, and the
    stage commands still run."""
    rounds = defs_module("cli_rounds")
    if rounds is None:
        raise RoundError("a whole round runs as a Dagster run (its steps are the assets `make dagster` shows), so it "
                         "needs the dagster extra: pip install '.[dagster]' (docs/install.md). Without it, run the "
                         "round's stages: automem rollout --training, diagnose, propose --register, evaluate, decide "
                         "(or curate, finetune), or the DVC pipeline")
    return rounds


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


META_CHOICES = {
    "rules": "the rules meta: deterministic, no model; each finding is a rule that fired on the computed evidence "
             "(dead files, redundant writes, prompt growth, stuck and back-and-forth stretches, failing operations) "
             "and each change is the structural fix that rule names. The structure loop's baseline",
    "endpoints": "the endpoints file's meta role (by default the embedded SmolLM2-135M, a 135M model: its diagnoses "
                 "and patches are mostly noise, and each call takes about a minute on 2 cores)",
}
"""Who diagnoses and revises in a round the demo runs."""


@asynccontextmanager
async def session(endpoints_path: Path, needs_model: bool = True, meta: str = "endpoints", embed: bool = False):
    """Live clients and a progress callback for episodes; the embedded server is stopped on exit.

    Without ``needs_model`` (the random baseline) no endpoint is read or started and there are no clients.
    ``meta`` is ``endpoints`` (the file's meta role) or ``rules`` (the rules meta, ``META_CHOICES``);
    ``embed`` adds the embeddings client (``memory_settings.needs_embed``)."""
    config = endpoints_with_meta(endpoints_path, meta) if needs_model else None
    with episode_progress() as progress:
        if config is None:
            yield Clients(None, None, None), progress
            return
        async with connect(config, RUNS / "logs", embed=embed) as clients:
            yield clients, progress


def add_play_args(p: argparse.ArgumentParser, max_steps: int) -> None:
    """Options of a command that plays episodes: step budget and concurrency, then endpoints and output."""
    p.add_argument("--max-steps", type=int, default=max_steps, help=f"steps per episode (default {max_steps})")
    p.add_argument("--concurrency", type=int, default=2, help="episodes played at once")
    add_output_args(p)


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: embedded model)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: derived from the settings)")


def add_agent_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", choices=AGENTS, default="memory",
                   help="memory (the scaffold's agent, default) or a baseline without memory: random, window, cot")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                   help=f"steps of history in context for the window, cot, rag and summary baselines "
                        f"(default {DEFAULT_WINDOW})")
    rag, summary = RagSettings(), SummarySettings()
    p.add_argument("--rag-retriever", choices=RETRIEVERS, default=rag.retriever,
                   help="rag: embedding (the endpoints file's embed role, else the embedded model) or bm25 (lexical, "
                        f"no model); default {rag.retriever}")
    p.add_argument("--rag-k", type=int, default=rag.k, help=f"rag: records retrieved per step (default {rag.k})")
    p.add_argument("--rag-record", default=",".join(rag.record),
                   help=f"rag: what a retrieved record shows, some of {','.join(RECORD_FIELDS)} (default all)")
    p.add_argument("--summary-every", type=int, default=summary.every,
                   help=f"summary: steps between rewrites of the running summary (default {summary.every})")
    p.add_argument("--summary-tokens", type=int, default=summary.summary_tokens,
                   help=f"summary: the summary's cap in tokens (default {summary.summary_tokens})")


def agent_settings(args: argparse.Namespace) -> dict:
    """The ``rag`` or ``summary`` agent's settings from its options (an empty dict for the other agents)."""
    agent = getattr(args, "agent", "memory")
    given = {"rag": lambda: {"retriever": args.rag_retriever, "k": args.rag_k,
                             "record": [f.strip() for f in args.rag_record.split(",") if f.strip()]},
             "summary": lambda: {"every": args.summary_every, "summary_tokens": args.summary_tokens}}
    if agent not in given:
        return {}
    try:
        settings_for(agent, given[agent]())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}: fix the --{agent}-... options") from exc
    return given[agent]()


def add_round_args(p: argparse.ArgumentParser, purpose: str = "diagnose", episodes: int = 4, max_steps: int = 50) -> None:
    add_game_arg(p)
    p.add_argument("--episodes", type=int, default=episodes, help=f"training-seed episodes to {purpose} (default {episodes})")
    p.add_argument("--max-steps", type=int, default=max_steps, help=f"steps per training-seed episode (default {max_steps})")
    p.add_argument("--eval-episodes", type=int, default=None,
                   help="evaluate on the first k evaluation seeds only (default: the whole set in assets/seeds)")
    p.add_argument("--eval-max-steps", type=int, default=50, help="steps per evaluation episode (default 50)")
    p.add_argument("--concurrency", type=int, default=2, help="episodes played at once")
    p.add_argument("--attempts", type=int, default=3, help="meta-LLM attempts per diagnosis or revision (default 3)")
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: embedded model)")
    p.add_argument("--no-tracking", action="store_true", help="do not log the evaluations to MLflow")


def add_gate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gate", choices=GATE_RULES, default="significant",
                   help="keep rule, answering kept, rolled back or inconclusive: significant (default; a paired "
                        "permutation test must put the gain beyond chance and the noise floor), higher_mean "
                        "(AutoMem's: a mean higher by more than the noise floor) or equal_score (also keeps a "
                        "candidate that is not worse and lower in --gate-metric beyond chance); see docs/gates.md")
    p.add_argument("--gate-level", type=float, default=0.05,
                   help="significant and equal_score gates: p-value to beat (default 0.05)")
    p.add_argument("--gate-min-seeds", type=int, default=5,
                   help="significant and equal_score gates: fewest paired seeds (default 5)")
    p.add_argument("--gate-metric", type=_gate_metric, default=None,
                   help=f"equal_score gate: the cost or behaviour metric (lower is better) a candidate may win on: "
                        f"{', '.join(GATE_METRICS)} (an empty value: none, for a DVC parameter)")
    p.add_argument("--gate-margin", type=float, default=0.1,
                   help="equal_score gate: how far below 0 the progression difference's lower bound may fall, as a "
                        "share of the champion's score (default 0.1; never less than the noise floor)")
    p.add_argument("--gate-min-gain", type=float, default=5.0,
                   help="the smallest gain worth having, in progression points: the significant gates roll back once "
                        "the evidence rules it out, and an inconclusive decision says how many seeds would detect it "
                        "(default 5)")


def _gate_metric(text: str) -> str | None:
    if text and text not in GATE_METRICS:
        raise argparse.ArgumentTypeError(f"--gate-metric {text!r}: use one of {', '.join(GATE_METRICS)}")
    return text or None


def gate_policy(args: argparse.Namespace) -> GatePolicy:
    """The round's gate from its options (commands without them: ``GatePolicy``'s defaults)."""
    default = GatePolicy()
    try:
        return GatePolicy(getattr(args, "gate", default.rule), getattr(args, "gate_level", default.level),
                          getattr(args, "gate_min_seeds", default.min_seeds), getattr(args, "gate_metric", None),
                          getattr(args, "gate_margin", default.margin), getattr(args, "gate_min_gain", default.min_gain))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}: fix --gate, --gate-level, --gate-min-seeds, --gate-metric, "
                                         "--gate-margin or --gate-min-gain") from exc


def proficiency_settings(args: argparse.Namespace) -> ProficiencySettings:
    """The settings of ``train``, ``curate`` and ``finetune`` from their options (absent ones: defaults)."""
    lora_file = getattr(args, "lora_settings", None)
    budget = RoundSettings(args.game, getattr(args, "episodes", 4), getattr(args, "max_steps", 50),
                           getattr(args, "eval_max_steps", 50), getattr(args, "eval_episodes", None),
                           getattr(args, "concurrency", 2), getattr(args, "attempts", 3), gate_policy(args))
    return build_proficiency_settings(
        budget, horizon=getattr(args, "horizon", 50), review_batches=getattr(args, "review_batches", 10),
        min_examples=getattr(args, "min_examples", None), accept_score=getattr(args, "accept_score", None),
        lora_json=lora_file.read_text() if lora_file else None, base=getattr(args, "base", "embedded"),
        max_train_steps=getattr(args, "max_train_steps", None))


def evaluation_metrics(summary: BatchSummary) -> dict:
    """A flat metrics file DVC can show and compare: progression and behaviour of one batch."""
    return {"progression_mean": summary.progression.mean, "progression_se": summary.progression.stderr,
            "episodes": len(summary.episodes), **summary.behaviour.as_dict()}



GAME_HELP = ("crafter, nethack, minihack:<Task>, babyai:<Task>, textworld:coin_collector, or an installed plugin's game "
             "(docs/environments.md)")


def add_game_arg(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--game", required=required, help=GAME_HELP)


def add_batch_args(p: argparse.ArgumentParser, batch_help: str) -> None:
    """The options of a stage that reads one finished rollout batch (``diagnose``, ``curate``): the game, the
    batch, and its scaffold, by default the one its ``batch.json`` names, so the stage reads what was played."""
    add_game_arg(p)
    p.add_argument("--batch", type=Path, required=True, help=batch_help)
    p.add_argument("--scaffold", default=None, help="the batch's scaffold (default: the one in batch.json)")
