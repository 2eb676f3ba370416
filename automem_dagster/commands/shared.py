"""What several commands share: where they store, how they connect, their common options and settings."""

from __future__ import annotations

import argparse
import importlib
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from automem_dagster.agent.baselines import AGENTS, DEFAULT_WINDOW
from automem_dagster.agent.memory_settings import RECORD_FIELDS, RETRIEVERS, RagSettings, SummarySettings, settings_for
from automem_dagster.commands.render import episode_progress
from automem_dagster.games import game_family
from automem_dagster.games.plugin import PluginError, env_ref
from automem_dagster.llm.config import endpoints_with_meta, load_endpoints
from automem_dagster.llm.session import Clients, connect
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.evaluation import play_beside_champion
from automem_dagster.loop.params_file import options_of_params
from automem_dagster.loop.serving import specialist_endpoints
from automem_dagster.loop.settings import ProficiencyConfig, StructureConfig
from automem_dagster.loop.storage import Storage, load_champion
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.options import Leaf, leaves, nest, select, value_at
from automem_dagster.paths import DEFAULT_ENDPOINTS, RUNS
from automem_dagster.rollout import BatchSummary, RolloutSpec, run_batch
from automem_dagster.rollout.seeds import eval_seeds
from automem_dagster.training.base_model import EMBEDDED_BASE, describe_base
from automem_dagster.training.registry import AdapterRecord

C = TypeVar("C", bound=BaseModel)
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


def refuse_bad_round_inputs(game: str, endpoints: Path, meta: str = "endpoints", base: str | None = None) -> None:
    """What a whole round reads, read before its Dagster run starts: the game, the endpoints file (with ``meta``),
    the game's champion scaffold and evaluation seeds, and a proficiency round's training ``base`` when one is
    given. A bad one is the same one-line error ``evaluate`` gives (rc 2), where inside the run it would fail a
    step (the base: the training step, after the rollouts and curation), be retried and end in a stack trace
    minutes later. Budgets are checked earlier still, by the options model that parses them."""
    env_ref(game)
    endpoints_with_meta(endpoints, meta)
    load_champion(game_family(game), STORAGE)
    eval_seeds(game, STORAGE.seeds_file)
    if base not in (None, EMBEDDED_BASE):  # the packaged base ships with the install; another is read from disk
        describe_base(base)


@asynccontextmanager
async def connect_as(endpoints_path: Path, adapter: AdapterRecord | None, family: str, log_dir: Path = RUNS / "logs"):
    """Clients of the endpoints file's roles or, given ``adapter``, of the two-model agent with that adapter
    serving the memory role (``serving.specialist_endpoints``): how a pipeline stage connects. The
    embedded server's log goes to ``log_dir``."""
    config, lora = load_endpoints(endpoints_path), []
    if adapter is not None:
        config, lora = specialist_endpoints(config, adapter, family)
    async with connect(config, log_dir, lora=lora, two_model=adapter is not None) as clients:
        yield clients


async def play_as(spec: RolloutSpec, endpoints_path: Path, adapter: AdapterRecord | None,
                  log_dir: Path = RUNS / "logs") -> BatchSummary:
    """Play ``spec`` as ``connect_as`` connects: what a pipeline stage plays."""
    async with connect_as(endpoints_path, adapter, game_family(spec.game), log_dir) as clients:
        with episode_progress() as progress:
            return await run_batch(spec, clients, progress)


async def play_beside(challenger: tuple[RolloutSpec, AdapterRecord | None],
                      champion: tuple[RolloutSpec, AdapterRecord | None], tag: str,
                      endpoints_path: Path) -> tuple[BatchSummary, BatchSummary]:
    """A challenger played beside the champion's arms (``evaluation.play_beside_champion``), each side
    connected as its agent (``connect_as``; one connection where both are the same agent): the
    challenger's batch and the champion batch its decision pairs with it."""
    sides = (challenger, champion)
    agent = [adapter.id if adapter is not None else None for _, adapter in sides]
    async with AsyncExitStack() as stack:
        clients = {}
        for (spec, adapter), key in zip(sides, agent, strict=True):
            if key not in clients:
                clients[key] = await stack.enter_async_context(connect_as(endpoints_path, adapter, game_family(spec.game)))
        with episode_progress() as progress:
            return await play_beside_champion((challenger[0], clients[agent[0]]), (champion[0], clients[agent[1]]), tag,
                                              STORAGE, progress)


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


ROUND_OPTIONS = ("budget",)
CURATION_OPTIONS = ("curation",)
TRAINING_OPTIONS = ("training.max_train_steps", "training.base")
EVALUATION_OPTIONS = ("budget.eval_episodes", "budget.eval_max_steps", "budget.concurrency")
"""The options of a loop's config (``loop/settings.py``) each kind of command takes, by key or part, generated by
``add_options`` (``EVALUATION_OPTIONS``: a command that plays the evaluation seeds outside a round, so that with
its defaults it plays the batch a default round's evaluation plays: ``noise``, ``table``)."""


BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
"""What a yes-or-no option's value may say (``--keep-unmeasured false``; the flag alone says true)."""


def _parser(leaf: Leaf):
    """The argparse ``type`` of an option: its kind of the text, an empty value for None when it is optional
    (a DVC parameter cannot be absent), its choices checked with an error that lists them."""
    kind, flag, choices = leaf.kind, leaf.flag, (leaf.field.json_schema_extra or {}).get("choices")

    def parse(text: str):
        if leaf.optional and text == "":
            return None
        if kind is bool:
            if text.lower() not in BOOL_WORDS:
                raise argparse.ArgumentTypeError(f"{flag} {text!r}: use true or false (or the flag alone for true)")
            return BOOL_WORDS[text.lower()]
        if choices and text not in choices:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: use one of {', '.join(choices)}")
        return kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its own errors
    return parse


def add_options(p: argparse.ArgumentParser, config: type[BaseModel], names: tuple[str, ...],
                defaults: BaseModel | None = None) -> None:
    """Options ``names`` (keys or parts, ``options.select``) of the config ``config``, with the config's default
    (or a named config's, ``defaults``: the demo's cuts) and help: the CLI restates neither, so a default changed
    in ``loop/settings.py`` is the one ``--help`` shows.
    An option not given is absent from the parsed namespace, so ``options_from_args`` takes it from
    ``--settings`` (a params.yaml, as the DVC stages pass it), else from the config; a command on a named config
    has no ``--settings``: the named config is its base."""
    if defaults is None and "--settings" not in p._option_string_actions:
        p.add_argument("--settings", type=Path, default=None,
                       help="a params.yaml (automem params) whose values replace the defaults of the options not given")
    for leaf in select(config, names):
        default = leaf.field.default if defaults is None else value_at(defaults, leaf)
        shown = "empty" if default is None else default
        switch = {"nargs": "?", "const": True} if leaf.kind is bool else {}
        p.add_argument(leaf.flag, dest=leaf.dest, type=_parser(leaf), default=argparse.SUPPRESS,
                       help=f"{leaf.field.description} (default {shown})", **switch)


def options_from_args(args: argparse.Namespace, config: type[C], names: tuple[str, ...] | None = None,
                      defaults: BaseModel | None = None, **given) -> C:
    """``config`` from a command's options ``names`` (all by default) and ``given`` (by key): each given one,
    else the ``--settings`` file's value, else the config's default (or ``defaults``'s, a named config). A bad
    combination is refused naming the options to fix."""
    from_file = options_of_params(args.settings) if getattr(args, "settings", None) else {}
    every = leaves(config)
    values = {key: value_at(defaults, leaf) for key, leaf in every.items()} if defaults is not None else {}
    for leaf in select(config, names):
        if hasattr(args, leaf.dest):
            values[leaf.key] = getattr(args, leaf.dest)
        elif leaf.key in from_file:
            values[leaf.key] = from_file[leaf.key]
    try:
        return config.model_validate(nest({**values, **given}))
    except ValidationError as exc:
        located = [".".join(map(str, e["loc"])) for e in exc.errors()]
        wrong = sorted({every[key].flag if key in every else
                        ", ".join(leaf.flag for k, leaf in every.items() if k.startswith(key + ".")) or "the options"
                        for key in located})
        reasons = "; ".join(e["msg"] for e in exc.errors())
        raise argparse.ArgumentTypeError(f"{reasons}: fix {', '.join(wrong)}") from exc


def add_round_args(p: argparse.ArgumentParser, config: type[StructureConfig] = StructureConfig) -> None:
    """A whole round's options: the game, its budget (``ROUND_OPTIONS`` of ``config``), endpoints, tracking."""
    add_game_arg(p)
    add_options(p, config, ROUND_OPTIONS)
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: embedded model)")
    p.add_argument("--no-tracking", action="store_true", help="do not log the evaluations to MLflow")


def add_gate_args(p: argparse.ArgumentParser) -> None:
    add_options(p, StructureConfig, ("gate",))


def gate_policy(args: argparse.Namespace) -> GatePolicy:
    """The round's gate from its options (commands without them: the config's defaults)."""
    return options_from_args(args, StructureConfig, ("gate",)).gate.policy()


def round_settings(args: argparse.Namespace) -> StructureConfig:
    """The config of ``revise`` and ``rounds`` from their options, bound to their game."""
    return options_from_args(args, StructureConfig).for_game(args.game)


def proficiency_settings(args: argparse.Namespace) -> ProficiencyConfig:
    """The config of ``train``, ``curate`` and ``finetune`` from their options (absent ones: defaults)."""
    lora_file = getattr(args, "lora_settings", None)
    given = {"training.lora_settings": lora_file.read_text()} if lora_file else {}
    return options_from_args(args, ProficiencyConfig, **given).for_game(args.game)


def evaluation_metrics(summary: BatchSummary) -> dict:
    """A flat metrics file DVC can show and compare: progression and behaviour of one batch."""
    return {"progression_mean": summary.progression.mean, "progression_se": summary.progression.stderr,
            "episodes": len(summary.episodes), **summary.behaviour.as_dict()}


GAME_HELP = ("crafter, nethack, minihack:<Task>, babyai:<Task>, textworld:coin_collector, keydoor[:hall<N>-decoys<N>], "
             "courier[:walk<N>-parcels<N>], or an installed plugin's game (docs/environments.md)")


def canonical_game(args: argparse.Namespace) -> None:
    """``--game`` as the game's canonical name (``keydoor`` -> ``keydoor:hall4-decoys2``), the one spelling
    of its partition, batch folders and records; run by ``cli.main`` before the command. A name that
    resolves to no game is left as given: the command says what is wrong with it in its own terms
    (``lineage`` takes a bare family, ``minihack``)."""
    if getattr(args, "game", None):
        try:
            args.game = env_ref(args.game).name
        except PluginError:
            pass


def first_eval_seeds(game: str, episodes: int | None) -> list[int]:
    """The first ``episodes`` evaluation seeds of ``game`` (``--eval-episodes`` of the commands that measure on
    them, ``headroom`` and ``facts``; None: all); more than the game has is refused, naming how many it has."""
    seeds = eval_seeds(game, STORAGE.seeds_file)
    if episodes is None:
        return seeds
    if not 1 <= episodes <= len(seeds):
        raise argparse.ArgumentTypeError(f"--eval-episodes {episodes}: {game} has {len(seeds)} evaluation seeds")
    return seeds[:episodes]


def add_game_arg(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--game", required=required, help=GAME_HELP)


def add_batch_args(p: argparse.ArgumentParser, batch_help: str) -> None:
    """The options of a stage that reads one finished rollout batch (``diagnose``, ``curate``): the game, the
    batch, and its scaffold, by default the one its ``batch.json`` names, so the stage reads what was played."""
    add_game_arg(p)
    p.add_argument("--batch", type=Path, required=True, help=batch_help)
    p.add_argument("--scaffold", default=None, help="the batch's scaffold (default: the one in batch.json)")
