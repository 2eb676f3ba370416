"""The budgets of both loops' rounds: what a person sets (CLI options or Dagster run config)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from automem_dagster.games import environment, game_family
from automem_dagster.meta.curate import CurationSettings
from automem_dagster.meta.decisions import ScoreWeights
from automem_dagster.meta.lora_config import validate_settings
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.rollout.seeds import DEFAULT_SEEDS_FILE, eval_seeds
from automem_dagster.training.settings import LoraSettings


@dataclass(frozen=True)
class RoundSettings:
    """The budget of one round. Defaults are AutoMem's evaluation sets (``assets/seeds``);
    ``eval_episodes`` takes the first k evaluation seeds for a cheap local round; ``gate`` is the
    decision policy (``significant`` unless a round asks for AutoMem's ``higher_mean`` or ``equal_score``)."""

    game: str
    rollout_episodes: int = 4
    rollout_max_steps: int = 50
    eval_max_steps: int = 50
    eval_episodes: int | None = None
    concurrency: int = 2
    max_attempts: int = 3
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


def proficiency_settings(budget: RoundSettings, *, horizon: int, review_batches: int, min_examples: int | None = None,
                         accept_score: float | None = None, lora_json: str | None = None, base: str | None = None,
                         max_train_steps: int | None = None) -> ProficiencySettings:
    """The settings of a proficiency round from the options a person gives (CLI flags or Dagster run
    config): absent minimum and acceptance score take the curation's defaults, ``lora_json`` (a JSON
    object of LoRA settings within bounds) replaces the meta-LLM's recommendation."""
    overrides = {"weights": ScoreWeights(horizon=horizon), "max_review_batches": review_batches}
    if min_examples is not None:
        overrides["min_examples"] = min_examples
    if accept_score is not None:
        overrides["accept_score"] = accept_score
    lora = validate_settings(json.loads(lora_json)) if lora_json else None
    return ProficiencySettings(budget, default_curation(budget.game, **overrides), base=base,
                               max_train_steps=max_train_steps, lora=lora)
