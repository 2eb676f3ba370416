"""LoRA training settings and the bounds every recommendation must stay within.

The meta-LLM recommends these from the dataset's statistics (``meta/lora_config.py``); the
bounds here are what makes a recommendation usable at all, so an out-of-range value is an
error naming the field, never silently clipped. ``default_settings`` scales AutoMem's
published configuration (the AutoMem paper: rank 128-256 with alpha = 2 x rank, lr 5e-5, 1-4
epochs, cosine schedule, warmup 0.05, on a 32B model with hidden size 5120) to the base.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Projection layers of llama-type models a LoRA may adapt (and the GGUF export can map)."""

REFERENCE_HIDDEN = 5120
REFERENCE_RANK = 128
REFERENCE_LR = 5e-5


class LoraSettings(BaseModel):
    """One LoRA SFT configuration; every field bounded."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=2, le=256)
    alpha: int = Field(ge=1, le=512)
    dropout: float = Field(ge=0.0, le=0.3)
    learning_rate: float = Field(ge=1e-6, le=1e-3)
    epochs: int = Field(ge=1, le=10)
    batch_size: int = Field(ge=1, le=64)
    target_modules: list[str] = Field(min_length=1)
    max_length: int = Field(ge=128, le=8192)
    warmup_ratio: float = Field(0.05, ge=0.0, le=0.3)
    lr_scheduler: str = Field("cosine", pattern="^(cosine|linear|constant)$")

    @model_validator(mode="after")
    def _sound(self) -> LoraSettings:
        unknown = sorted(set(self.target_modules) - set(TARGET_MODULES))
        if unknown:
            raise ValueError(f"target_modules {unknown} are not projections of the base; choose from {list(TARGET_MODULES)}")
        if len(set(self.target_modules)) != len(self.target_modules):
            raise ValueError("target_modules lists a module twice")
        if not 0.5 <= self.alpha / self.rank <= 4:
            raise ValueError(f"alpha/rank = {self.alpha}/{self.rank}: keep the LoRA scale between 0.5 and 4 (the paper: 2)")
        return self


def default_settings(hidden_size: int, max_length: int = 2048) -> LoraSettings:
    """The AutoMem paper's configuration scaled to a base with ``hidden_size``: the rank shrinks with
    the width (a power of two, at least 8), alpha stays 2 x rank, and the learning rate grows
    with the square root of the shrink, as smaller LoRAs on smaller models need larger steps."""
    shrink = REFERENCE_HIDDEN / hidden_size
    rank = max(8, 2 ** round(math.log2(REFERENCE_RANK / shrink)))
    lr = min(1e-3, REFERENCE_LR * math.sqrt(max(1.0, shrink)))
    return LoraSettings(rank=rank, alpha=2 * rank, dropout=0.05, learning_rate=float(f"{lr:.2g}"), epochs=2,
                        batch_size=4, target_modules=list(TARGET_MODULES[:4]), max_length=max_length)
