"""One frozen, typed config per loop: what a person sets (CLI flags, Dagster run config, params.yaml) is what
a round runs on.

``StructureConfig`` (budget, gate) and ``ProficiencyConfig`` (also curation, training) are the one place a
round's option has its default and its help, and the core takes them as they are: no settings layer is built
from them field by field. The CLI generates its flags from them (``commands/shared.add_options``), the Dagster
run config mirrors their parts (``defs/common/config.py``) and ``automem params`` writes ``params.yaml`` from
them (``loop/params_file.py``). The game is not an option (the Dagster partition, the CLI's ``--game``):
``for_game`` binds it to a config, which the core then reads as ``config.game``.

One set of defaults for every entry point: the small local round (2 training episodes, 2 evaluation seeds
of 10 steps) that the embedded 135M model on a CPU plays in minutes; a real round raises them explicitly
(docs/design.md). Curation has two horizons with names that say which is which: ``score_window`` (10), the
steps whose advantage the cheap score reads, which only orders the replay, and ``replay.horizon`` (32), the
cap on the steps a replayed arm plays (``meta/counterfactual.py``: it stops sooner where the decision's
content was last read).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Self

from pydantic import PrivateAttr, field_validator, model_validator

from automem_dagster.games import environment, game_family
from automem_dagster.meta.counterfactual import ReplayBudget
from automem_dagster.meta.curate import CurationSettings
from automem_dagster.meta.decisions import ScoreWeights
from automem_dagster.meta.lora_config import validate_settings
from automem_dagster.metrics.paired import GATE_METRICS, GATE_RULES, GatePolicy
from automem_dagster.options import Budget, Part, option
from automem_dagster.rollout.seeds import DEFAULT_SEEDS_FILE, eval_seeds
from automem_dagster.training.base_model import EMBEDDED_BASE
from automem_dagster.training.settings import LoraSettings

_GATE = GatePolicy()
"""The gate's own defaults (``metrics/paired.py``), read once here so that no option restates them."""
_REPLAY = ReplayBudget()
"""The counterfactual replay's own defaults (``meta/counterfactual.py``), read the same way."""


class Gate(Part):
    """The keep-or-roll-back rule (``metrics/paired.GatePolicy``, whose defaults these are)."""

    flag_prefix = "gate"
    rule: str = option(
        _GATE.rule, "keep rule, answering kept, rolled back or inconclusive: significant (a paired permutation test "
        "must put the gain beyond chance and the noise floor), higher_mean (AutoMem's: a mean higher by more than "
        "the noise floor) or equal_score (also keeps a candidate that is not worse and lower in the gate metric "
        "beyond chance); docs/gates.md", "--gate", "gate.rule", GATE_RULES)
    level: float = option(_GATE.level, "significant and equal_score gates: one-sided p-value to beat",
                          param="gate.level", gt=0, lt=1)
    min_seeds: int = option(_GATE.min_seeds, "significant and equal_score gates: fewest paired seeds they keep on",
                            param="gate.min_seeds", ge=1)
    metric: str | None = option(
        _GATE.metric, f"equal_score gate: the cost or behaviour metric (lower is better) a candidate may win on: "
        f"{', '.join(GATE_METRICS)}; empty (null): none", param="gate.metric", choices=GATE_METRICS)
    margin: float = option(_GATE.margin, "equal_score gate: how far below 0 the progression difference's lower bound "
                           "may fall, as a share of the champion's score (never less than the noise floor)",
                           param="gate.margin", ge=0, lt=1)
    min_gain: float = option(_GATE.min_gain, "the smallest gain worth having, in progression points: the significant "
                             "gates roll back once the evidence rules it out, and an inconclusive decision says how "
                             "many seeds would detect it", param="gate.min_gain", gt=0)

    @model_validator(mode="after")
    def _valid(self) -> Self:
        self.policy()  # GatePolicy's ValueError names the setting and its allowed values
        return self

    def policy(self) -> GatePolicy:
        return GatePolicy(**self.model_dump())


class Replay(Part):
    """The counterfactual replay's budget (``meta/counterfactual.ReplayBudget``, whose defaults these are)."""

    flag_prefix = "replay"
    decisions: int | None = option(_REPLAY.decisions, "eligible decisions replayed with and without them, best cheap "
                                   "scores first (only a replayed decision whose effect clears the floor trains); "
                                   "empty (null): every one; 0: none", param="curate.replay_decisions", ge=0)
    horizon: int = option(_REPLAY.horizon, "the replay's cap: most steps an arm plays from the decision's step (it "
                          "stops sooner where the decision's content was last read)", param="curate.replay_horizon",
                          ge=1)
    pairs: int = option(_REPLAY.pairs, "pairs of arms (as made, ablated) per replayed decision, averaged",
                        param="curate.replay_pairs", ge=1)
    floor_pairs: int = option(_REPLAY.floor_pairs, "A/A pairs (as made against as made, same seeds) whose largest "
                              "difference is the credit floor an effect must clear; 0: floor 0",
                              param="curate.replay_floor_pairs", ge=0)


class Curation(Part):
    """Which memory decisions become training examples (``meta/curate.py``)."""

    min_examples: int | None = option(16, "stop before training below this many curated examples (at least 2: "
                                      "training holds one out to validate on); empty (null): the game's minimum "
                                      "from the paper (300 MiniHack to 800 NetHack)",
                                      param="curate.min_examples", ge=2)
    score_window: int = option(10, "the cheap score's window: steps from a memory decision on whose advantage orders "
                               "the replay (not the replay's horizon)", param="curate.score_window", ge=1)
    max_review_batches: int = option(2, "meta-LLM calls reviewing borderline unmeasured decisions (with "
                                     "--keep-unmeasured), at most", "--review-batches", "curate.review_batches", ge=0)
    accept_score: float | None = option(None, "with --keep-unmeasured: take unmeasured decisions scoring at least this "
                                        "without review; empty (null): the curation's default (1.0)",
                                        param="curate.accept_score")
    replay: Replay = Replay()
    keep_unmeasured: bool = option(False, "also train on eligible decisions the replay did not measure, by the cheap "
                                   "score; every such row, the dataset card and the MLflow run say unmeasured",
                                   param="curate.keep_unmeasured")

    def settings(self, game: str) -> CurationSettings:
        """The curation's thresholds for ``game``: its minimum where none is given, the curation's own defaults
        for what a person does not set (``CurationSettings``)."""
        given = {"min_examples": self.min_examples or environment(game_family(game)).min_examples,
                 "weights": ScoreWeights(horizon=self.score_window), "max_review_batches": self.max_review_batches,
                 "replay": ReplayBudget(**self.replay.model_dump()), "keep_unmeasured": self.keep_unmeasured}
        return CurationSettings(**given, **({} if self.accept_score is None else {"accept_score": self.accept_score}))


class Training(Part):
    """The LoRA training of a specialist (``training/``)."""

    max_train_steps: int | None = option(20, "cap on optimizer steps; empty (null): the full epochs",
                                         param="finetune.max_steps", ge=1)
    base: str | None = option(None, "base model: embedded (the packaged SmolLM2) or a Hugging Face model directory; "
                              "empty (null): the base the vLLM memory endpoint serves, else embedded",
                              param="finetune.base")
    eval_every: int | None = option(None, "validation passes every this many optimizer steps; empty (null): about "
                                    "four a run", ge=1)
    lora_settings: str | None = option(None, "LoRA settings as a JSON object within bounds (rank, alpha, dropout, "
                                       "learning_rate, epochs, batch_size, target_modules, max_length); the meta-LLM "
                                       "is then not asked. null: the meta-LLM recommends")

    @field_validator("lora_settings")
    @classmethod
    def _lora_within_bounds(cls, text: str | None) -> str | None:
        if text is not None:
            validate_settings(json.loads(text))
        return text

    @property
    def lora(self) -> LoraSettings | None:
        """The LoRA settings a person gave, or None: the meta-LLM recommends."""
        return validate_settings(json.loads(self.lora_settings)) if self.lora_settings else None

    @property
    def training_base(self) -> str:
        """``base``, or ``embedded`` where it was never filled in (``serving.with_training_base`` fills it)."""
        return self.base or EMBEDDED_BASE


class StructureConfig(Part):
    """A structure round's config: its budget and its gate."""

    budget: Budget = Budget()
    gate: Gate = Gate()
    seed_block: int | None = option(None, "which block of rollout_episodes training seeds to play; empty (null): the "
                                    "loop's rule (a fresh block per challenger)", param="rollout.seed_block", ge=0)
    """Which block a round plays; None: the loop's rule (``seed_blocks.seed_block``: a fresh block per registered
    challenger). Rounds back to back (``loop/rounds.py``) set it, so that a round after a rejected revision plays
    new episodes too."""
    _game: str | None = PrivateAttr(None)

    def for_game(self, game: str) -> Self:
        """This config bound to ``game`` (the Dagster partition's, the CLI's ``--game``): what the core runs on."""
        bound = self.model_copy()
        bound._game = game
        return bound

    @property
    def game(self) -> str:
        if self._game is None:
            raise ValueError(f"{type(self).__name__} is bound to no game: call for_game(game) before running it")
        return self._game

    @property
    def family(self) -> str:
        return game_family(self.game)

    def eval_seed_list(self, seeds_file: Path = DEFAULT_SEEDS_FILE) -> list[int]:
        """The round's evaluation seeds: the first ``eval_episodes`` of the game's fixed set (all: None)."""
        seeds = eval_seeds(self.game, seeds_file)
        return seeds[: self.budget.eval_episodes] if self.budget.eval_episodes else seeds


class ProficiencyBudget(Budget):
    """A proficiency round's budget: longer training rollouts, with room for the score window."""

    rollout_max_steps: int = option(20, "steps per training-rollout episode (room for the score window)",
                                    param="rollout.max_steps", ge=1)


class ProficiencyConfig(StructureConfig):
    """A proficiency round's config: a structure round's parts, then curation and training (the AutoMem paper:
    300 to 800 curated examples and full epochs for a real round)."""

    budget: ProficiencyBudget = ProficiencyBudget()
    curation: Curation = Curation()
    training: Training = Training()

    def curation_settings(self) -> CurationSettings:
        return self.curation.settings(self.game)

    def with_training(self, **changes) -> Self:
        return self.model_copy(update={"training": self.training.model_copy(update=changes)})


class RoundsPlan(Part):
    """When structure rounds back to back stop (``loop/rounds.py``): after ``patience`` in a row keep nothing,
    or ``max_rounds`` rounds."""

    max_rounds: int = option(5, "at most this many structure rounds")
    patience: int = option(2, "stop after this many rounds in a row keep nothing (1: Dagster's next_round_sensor, "
                              "which chains rounds only after a keep)")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max_rounds < 1:
            raise ValueError(f"--max-rounds {self.max_rounds}: at least 1 round")
        if not 1 <= self.patience <= self.max_rounds:
            raise ValueError(f"--patience {self.patience}: between 1 and --max-rounds ({self.max_rounds}) rounds "
                             "that keep nothing in a row")
        return self


MEASURE = StructureConfig(budget=Budget(eval_episodes=30, eval_max_steps=30))
"""The budget of a measurement outside the loops (``headroom``, ``facts``): enough evaluation seeds for a paired
difference to mean something, and episodes long enough to reach a memory game's decision."""


DEMO_GAME = "keydoor:hall4-decoys2"
"""``keydoor`` by its canonical name (its Dagster partition is ``keydoor-hall4-decoys2``): memory decides."""
DEMO = ProficiencyConfig(
    budget=ProficiencyBudget(rollout_episodes=6, rollout_max_steps=5, eval_episodes=5, eval_max_steps=5,
                             concurrency=1),
    curation=Curation(min_examples=2, score_window=4, accept_score=0.0, max_review_batches=2,
                      replay=Replay(decisions=16, floor_pairs=1, horizon=5)),
    training=Training(max_train_steps=3, eval_every=3),
).for_game(DEMO_GAME)
"""What ``automem demo``'s proficiency round cuts from a full run so that both loops run for real within minutes on 2
cores. Episodes of 5 steps, for training and evaluation alike: a keydoor episode of hall 4 answers the junction at
its 5th step, so a 5-step episode ends on the one choice memory decides, the key found (50 %) or not (0 %), and
plays none of the 4 later steps to the door that no memory decision changes (nor a second try at the junction, which
would let a consultation left out be made up a step later, so the replay could credit no read). 5 evaluation seeds
(the fewest the significant gate decides on, p down to 0.031; a full decision: at least 30); 6 training episodes (a
decision with an effect comes from an episode that found the key, about half of them); one episode at a time (faster
on 2 cores); a dataset minimum of 2 (the game's: 30; training holds one example out to validate on); the 16 eligible
decisions with the best cheap scores replayed (full: every one; the cheap score puts the late steps of the episodes
that found the key first) against 1 A/A pair (full: 3), only a measured effect training as in a full round; 3 LoRA
steps with validation before the first and after the last (``docs/results.md`` has what it measured)."""

DEMO_STRUCTURE = StructureConfig(budget=Budget(**DEMO.budget.model_dump() | {"rollout_episodes": 3}),
                                 gate=DEMO.gate).for_game(DEMO_GAME)
"""``automem demo``'s structure round: ``DEMO``'s budget, with 3 training episodes to diagnose (the rules meta
reads its evidence from a few; the proficiency round needs more episodes that found the key)."""
