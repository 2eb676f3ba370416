"""The budgets of both loops' rounds: what a person sets (CLI options, Dagster run config, params.yaml).

``StructureOptions`` and ``ProficiencyOptions`` are the one place a round's option has its default and
its help: the CLI generates its options from them (``commands/shared.add_options``), the Dagster run
config *is* them (``defs/common/config.RoundConfig`` inherits the model), and ``automem params`` writes
``params.yaml`` from them. ``RoundSettings`` and ``ProficiencySettings`` are what a round runs on, built
by ``settings(game)``; their defaults are read from the options, never written again.

One set of defaults for every entry point: the small local round (2 training episodes, 2 evaluation seeds
of 10 steps) that the embedded 135M model on a CPU plays in minutes, as Dagster and DVC already had; the
CLI's larger ones (4 x 50 steps, the whole evaluation set; train: 8 x 100 and the paper's 300 to 800
examples) are what a real round sets explicitly (docs/design.md). Curation has two horizons with names
that say which is which: ``score_window`` (10), the steps whose advantage the cheap score reads, which
only orders the replay, and ``replay_horizon`` (32), the cap on the steps a replayed arm plays
(``meta/counterfactual.py``: it stops sooner where the decision's content was last read).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from automem_dagster.games import environment, game_family
from automem_dagster.meta.counterfactual import ReplayBudget
from automem_dagster.meta.curate import CurationSettings
from automem_dagster.meta.decisions import ScoreWeights
from automem_dagster.meta.lora_config import validate_settings
from automem_dagster.metrics.paired import GATE_METRICS, GATE_RULES, GatePolicy
from automem_dagster.rollout.seeds import DEFAULT_SEEDS_FILE, eval_seeds
from automem_dagster.training.settings import LoraSettings


@dataclass(frozen=True)
class RoundSettings:
    """The budget of one round. Defaults are AutoMem's evaluation sets (``assets/seeds``);
    ``eval_episodes`` takes the first k evaluation seeds for a cheap local round; ``gate`` is the
    decision policy (``significant`` unless a round asks for AutoMem's ``higher_mean`` or ``equal_score``)."""

    game: str
    rollout_episodes: int = field(default_factory=lambda: default("rollout_episodes"))
    rollout_max_steps: int = field(default_factory=lambda: default("rollout_max_steps"))
    eval_max_steps: int = field(default_factory=lambda: default("eval_max_steps"))
    eval_episodes: int | None = field(default_factory=lambda: default("eval_episodes"))
    concurrency: int = field(default_factory=lambda: default("concurrency"))
    max_attempts: int = field(default_factory=lambda: default("max_attempts"))
    gate: GatePolicy = field(default_factory=GatePolicy)
    seed_block: int | None = None
    """Which block of ``rollout_episodes`` training seeds the round plays; None: the loop's rule
    (``seed_blocks.seed_block``: a fresh block per registered challenger). Rounds back to back
    (``loop/rounds.py``) set it, so that a round after a rejected revision plays new episodes too."""

    @property
    def family(self) -> str:
        return game_family(self.game)

    def eval_seed_list(self, seeds_file: Path = DEFAULT_SEEDS_FILE) -> list[int]:
        seeds = eval_seeds(self.game, seeds_file)
        return seeds[: self.eval_episodes] if self.eval_episodes else seeds




@dataclass(frozen=True)
class ProficiencySettings:
    """A round's budget: rollouts and evaluation as in the structure loop (``budget``), then
    curation, the base model and an optional cap on optimizer steps (a short local round)."""

    budget: RoundSettings
    curation: CurationSettings = field(default_factory=CurationSettings)
    base: str | None = None
    """The base model to train on: ``embedded``, a hub id or a folder; None until ``serving.with_training_base``
    fills in the base the serving vLLM serves (``embedded`` where none does)."""
    max_train_steps: int | None = None
    lora: LoraSettings | None = None
    """Settings given by a person; the meta-LLM is then not asked."""
    eval_every: int | None = None
    """Validation passes every this many steps (and before the first); None: about four a run.
    A pass over the validation split can cost more than a CPU step, so a short run sets it."""

    @property
    def game(self) -> str:
        return self.budget.game

    @property
    def training_base(self) -> str:
        """``base``, or ``embedded`` where it was never filled in."""
        return self.base or "embedded"

    @property
    def family(self) -> str:
        return game_family(self.budget.game)


def default_curation(game: str, **overrides) -> CurationSettings:
    return CurationSettings(**{"min_examples": environment(game_family(game)).min_examples, **overrides})


def proficiency_settings(budget: RoundSettings, *, score_window: int, review_batches: int,
                         min_examples: int | None = None, accept_score: float | None = None,
                         lora_json: str | None = None, base: str | None = None, max_train_steps: int | None = None,
                         replay: ReplayBudget | None = None, keep_unmeasured: bool = False) -> ProficiencySettings:
    """The settings of a proficiency round from the options a person gives (CLI flags or Dagster run
    config): absent minimum and acceptance score take the curation's defaults, ``lora_json`` (a JSON
    object of LoRA settings within bounds) replaces the meta-LLM's recommendation."""
    overrides = {"weights": ScoreWeights(horizon=score_window), "max_review_batches": review_batches,
                 "replay": replay or ReplayBudget(), "keep_unmeasured": keep_unmeasured}
    if min_examples is not None:
        overrides["min_examples"] = min_examples
    if accept_score is not None:
        overrides["accept_score"] = accept_score
    lora = validate_settings(json.loads(lora_json)) if lora_json else None
    return ProficiencySettings(budget, default_curation(budget.game, **overrides), base=base,
                               max_train_steps=max_train_steps, lora=lora)


_GATE = GatePolicy()
"""The gate's own defaults (``metrics/paired.py``), read once here so that no option restates them."""
_REPLAY = ReplayBudget()
"""The counterfactual replay's own defaults (``meta/counterfactual.py``), read the same way."""


def _option(default, description: str, flag: str | None = None, param: str | None = None,
            choices: tuple[str, ...] | None = None, **bounds):
    """A round option: its default and help, the CLI ``flag`` it gets when its name does not give it, the
    ``params.yaml`` key (``section.key``) the DVC pipeline reads it from, if any, and the values it takes
    (a plain ``str`` for Dagster's config schema, which has no ``Literal``; the gate checks them)."""
    extra = {k: v for k, v in (("flag", flag), ("param", param), ("choices", choices)) if v is not None}
    return Field(default, description=description, json_schema_extra=extra or None, **bounds)


class StructureOptions(BaseModel):
    """A structure round's options. Small local defaults: raise them for a real round (AutoMem used full
    seed sets and 50-step evaluations)."""

    rollout_episodes: int = _option(2, "training-seed episodes the round plays for its diagnosis (or curation)",
                                    param="rollout.episodes", ge=1)
    rollout_max_steps: int = _option(10, "steps per training-seed episode", param="rollout.max_steps", ge=1)
    eval_max_steps: int = _option(10, "steps per evaluation episode", param="evaluate.max_steps", ge=1)
    eval_episodes: int | None = _option(2, "the first k evaluation seeds of assets/seeds; empty (null): the whole "
                                           "fixed set", param="evaluate.episodes", ge=1)
    concurrency: int = _option(2, "episodes played at once (per shard)", ge=1)
    max_attempts: int = _option(3, "meta-LLM attempts per diagnosis or revision", "--attempts", ge=1)
    gate: str = _option(
        _GATE.rule, "keep rule, answering kept, rolled back or inconclusive: significant (a paired permutation test "
        "must put the gain beyond chance and the noise floor), higher_mean (AutoMem's: a mean higher by more than "
        "the noise floor) or equal_score (also keeps a candidate that is not worse and lower in the gate metric "
        "beyond chance); docs/gates.md", param="gate.rule", choices=GATE_RULES)
    gate_level: float = _option(_GATE.level, "significant and equal_score gates: one-sided p-value to beat",
                                param="gate.level", gt=0, lt=1)
    gate_min_seeds: int = _option(_GATE.min_seeds, "significant and equal_score gates: fewest paired seeds they "
                                  "keep on", param="gate.min_seeds", ge=1)
    gate_metric: str | None = _option(
        _GATE.metric, f"equal_score gate: the cost or behaviour metric (lower is better) a candidate may win on: "
        f"{', '.join(GATE_METRICS)}; empty (null): none", param="gate.metric", choices=GATE_METRICS)
    gate_margin: float = _option(_GATE.margin, "equal_score gate: how far below 0 the progression difference's lower "
                                 "bound may fall, as a share of the champion's score (never less than the noise "
                                 "floor)", param="gate.margin", ge=0, lt=1)
    gate_min_gain: float = _option(_GATE.min_gain, "the smallest gain worth having, in progression points: the "
                                   "significant gates roll back once the evidence rules it out, and an inconclusive "
                                   "decision says how many seeds would detect it", param="gate.min_gain", gt=0)
    seed_block: int | None = _option(None, "which block of rollout_episodes training seeds to play; empty (null): the "
                                     "loop's rule (a fresh block per challenger)", param="rollout.seed_block", ge=0)

    @model_validator(mode="after")
    def _gate_is_valid(self):
        self.gate_policy()  # GatePolicy's ValueError names the setting and its allowed values
        return self

    def gate_policy(self) -> GatePolicy:
        return GatePolicy(self.gate, self.gate_level, self.gate_min_seeds, self.gate_metric, self.gate_margin,
                          self.gate_min_gain)

    def settings(self, game: str) -> RoundSettings:
        return RoundSettings(game, self.rollout_episodes, self.rollout_max_steps, self.eval_max_steps,
                             self.eval_episodes, self.concurrency, self.max_attempts, self.gate_policy(),
                             self.seed_block)

    @classmethod
    def of_round(cls, settings: RoundSettings, **fields):
        """The options that give ``settings`` (a CLI round handed to Dagster), plus ``fields`` of a subclass."""
        gate = settings.gate
        return cls(rollout_episodes=settings.rollout_episodes, rollout_max_steps=settings.rollout_max_steps,
                   eval_max_steps=settings.eval_max_steps, eval_episodes=settings.eval_episodes,
                   concurrency=settings.concurrency, max_attempts=settings.max_attempts, gate=gate.rule,
                   gate_level=gate.level, gate_min_seeds=gate.min_seeds, gate_metric=gate.metric,
                   gate_margin=gate.margin, gate_min_gain=gate.min_gain, seed_block=settings.seed_block, **fields)


class ProficiencyOptions(StructureOptions):
    """A proficiency round's options: a structure round's, then curation and training (the AutoMem paper:
    300 to 800 curated examples and full epochs for a real round)."""

    rollout_max_steps: int = _option(20, "steps per training-rollout episode (room for the score window)",
                                     param="rollout.max_steps", ge=1)
    min_examples: int | None = _option(16, "stop before training below this many curated examples; empty (null): "
                                       "the game's minimum from the paper (300 MiniHack to 800 NetHack)",
                                       param="curate.min_examples", ge=1)
    score_window: int = _option(10, "the cheap score's window: steps from a memory decision on whose advantage "
                                "orders the replay (not the replay's horizon)", param="curate.score_window", ge=1)
    max_review_batches: int = _option(2, "meta-LLM calls reviewing borderline unmeasured decisions (with "
                                      "--keep-unmeasured), at most", "--review-batches", "curate.review_batches", ge=0)
    accept_score: float | None = _option(None, "with --keep-unmeasured: take unmeasured decisions scoring at least "
                                         "this without review; empty (null): the curation's default (1.0)",
                                         param="curate.accept_score")
    replay_decisions: int | None = _option(_REPLAY.decisions, "eligible decisions replayed with and without them, best "
                                           "cheap scores first (only a replayed decision whose effect clears the floor "
                                           "trains); empty (null): every one; 0: none", param="curate.replay_decisions",
                                           ge=0)
    replay_horizon: int = _option(_REPLAY.horizon, "the replay's cap: most steps an arm plays from the decision's step "
                                  "(it stops sooner where the decision's content was last read)",
                                  param="curate.replay_horizon", ge=1)
    replay_pairs: int = _option(_REPLAY.pairs, "pairs of arms (as made, ablated) per replayed decision, averaged",
                                param="curate.replay_pairs", ge=1)
    replay_floor_pairs: int = _option(_REPLAY.floor_pairs, "A/A pairs (as made against as made, same seeds) whose "
                                      "largest difference is the credit floor an effect must clear; 0: floor 0",
                                      param="curate.replay_floor_pairs", ge=0)
    keep_unmeasured: bool = _option(False, "also train on eligible decisions the replay did not measure, by the cheap "
                                    "score; every such row, the dataset card and the MLflow run say unmeasured",
                                    param="curate.keep_unmeasured")
    max_train_steps: int | None = _option(20, "cap on optimizer steps; empty (null): the full epochs",
                                          param="finetune.max_steps", ge=1)
    base: str | None = _option(None, "base model: embedded (the packaged SmolLM2) or a Hugging Face model directory; "
                               "empty (null): the base the vLLM memory endpoint serves, else embedded",
                               param="finetune.base")
    eval_every: int | None = _option(None, "validation passes every this many optimizer steps; empty (null): about "
                                     "four a run", ge=1)
    lora_settings: str | None = _option(None, "LoRA settings as a JSON object within bounds (rank, alpha, dropout, "
                                        "learning_rate, epochs, batch_size, target_modules, max_length); the "
                                        "meta-LLM is then not asked. null: the meta-LLM recommends")

    def settings(self, game: str) -> ProficiencySettings:
        replay = ReplayBudget(decisions=self.replay_decisions, horizon=self.replay_horizon, pairs=self.replay_pairs,
                              floor_pairs=self.replay_floor_pairs)
        built = proficiency_settings(super().settings(game), score_window=self.score_window,
                                     review_batches=self.max_review_batches, min_examples=self.min_examples,
                                     accept_score=self.accept_score, lora_json=self.lora_settings, base=self.base,
                                     max_train_steps=self.max_train_steps, replay=replay,
                                     keep_unmeasured=self.keep_unmeasured)
        return replace(built, eval_every=self.eval_every)

    @classmethod
    def of_proficiency(cls, settings: ProficiencySettings, **fields):
        """The options that give ``settings`` (a CLI round handed to Dagster), plus ``fields`` of a subclass."""
        curation = settings.curation
        return cls.of_round(settings.budget, min_examples=curation.min_examples,
                   score_window=curation.weights.horizon, max_review_batches=curation.max_review_batches,
                   replay_decisions=curation.replay.decisions, replay_horizon=curation.replay.horizon,
                   replay_pairs=curation.replay.pairs, replay_floor_pairs=curation.replay.floor_pairs,
                   keep_unmeasured=curation.keep_unmeasured,
                   accept_score=curation.accept_score, max_train_steps=settings.max_train_steps, base=settings.base,
                   eval_every=settings.eval_every,
                   lora_settings=settings.lora.model_dump_json() if settings.lora else None, **fields)


def default(name: str, options: type[StructureOptions] = StructureOptions):
    """An option's one default, for code that builds settings without options (a stage command)."""
    return options.model_fields[name].default


def params_of(options: ProficiencyOptions) -> dict[str, dict]:
    """The options that have a ``params.yaml`` key, in that file's sections; None as "" (a DVC parameter
    is substituted into a command line, where only an empty value can say none)."""
    sections: dict[str, dict] = {}
    for name, info in type(options).model_fields.items():
        key = (info.json_schema_extra or {}).get("param")
        if key:
            section, _, leaf = key.partition(".")
            value = getattr(options, name)
            sections.setdefault(section, {})[leaf] = "" if value is None else value
    return sections


def options_of_params(path: Path) -> dict:
    """The option values a ``params.yaml`` sets, by option name ("" read as none), checked by the model: a
    bad value is refused naming the file, the key and what the model allows."""
    import yaml
    from pydantic import ValidationError

    data = yaml.safe_load(Path(path).read_text()) or {}
    keys = {(f.json_schema_extra or {}).get("param"): name for name, f in ProficiencyOptions.model_fields.items()}
    values = {}
    for key, name in keys.items():
        section, _, leaf = (key or "").partition(".")
        if key and leaf in (data.get(section) or {}):
            given = data[section][leaf]
            values[name] = None if given == "" else given
    try:
        ProficiencyOptions(**values)
    except ValidationError as exc:
        where = {name: key for key, name in keys.items()}
        faults = "; ".join(f"{where.get(e['loc'][0], e['loc'][0]) if e['loc'] else 'gate'}: {e['msg']}"
                           for e in exc.errors())
        raise ValueError(f"{path}: {faults} (automem params --help lists every setting)") from exc
    return values
