"""The budget of a proficiency round as run config: a structure round's budget plus curation and training."""

from __future__ import annotations

from dataclasses import replace

from pydantic import Field

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.loop.settings import ProficiencySettings, proficiency_settings


class ProficiencyConfig(RoundConfig):
    """Small local defaults, as for a structure round; raise them in the launchpad for a real round
    (the AutoMem paper: 300 to 800 curated examples, full epochs instead of a capped step count)."""

    rollout_max_steps: int = Field(20, ge=1, description="steps per training-rollout episode")
    min_examples: int | None = Field(16, ge=1, description=(
        "stop before training below this many curated examples; the AutoMem paper's 300 (MiniHack) to 800 (NetHack) "
        "for a real run, null for the game's minimum from the paper"))
    horizon: int = Field(10, ge=1, description="K: steps after a memory decision whose outcome it is credited with")
    max_review_batches: int = Field(2, ge=0, description="meta-LLM calls reviewing borderline decisions, at most")
    max_train_steps: int | None = Field(20, ge=1, description="cap on optimizer steps; null to train the full epochs")
    base: str | None = Field(None, description="base model: embedded (the packaged SmolLM2) or a Hugging Face model "
                             "directory; null: the base the vLLM memory endpoint serves, else embedded")
    accept_score: float | None = Field(None, description="curation takes decisions scoring at least this without "
                                                         "review; null: the curation's default (1.0)")
    eval_every: int | None = Field(None, ge=1, description="validation passes every this many optimizer steps; "
                                                           "null: about four a run")
    lora_settings: str | None = Field(None, description=(
        'LoRA settings as a JSON object within bounds (rank, alpha, dropout, learning_rate, epochs, batch_size, '
        'target_modules, max_length); the meta-LLM is then not asked. null: the meta-LLM recommends'))

    def settings(self, game: str) -> ProficiencySettings:
        settings = proficiency_settings(super().settings(game), horizon=self.horizon,
                                        review_batches=self.max_review_batches, min_examples=self.min_examples,
                                        accept_score=self.accept_score, lora_json=self.lora_settings, base=self.base,
                                        max_train_steps=self.max_train_steps)
        return replace(settings, eval_every=self.eval_every)

    @classmethod
    def of_proficiency(cls, settings: ProficiencySettings) -> ProficiencyConfig:
        """The run config of a proficiency round with ``settings`` (a CLI round)."""
        curation = settings.curation
        return cls.of(settings.budget, min_examples=curation.min_examples, horizon=curation.weights.horizon,
                      max_review_batches=curation.max_review_batches, accept_score=curation.accept_score,
                      max_train_steps=settings.max_train_steps, base=settings.base, eval_every=settings.eval_every,
                      lora_settings=settings.lora.model_dump_json() if settings.lora else None)
