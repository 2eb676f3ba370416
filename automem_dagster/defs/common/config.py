"""The budget of a round as run config, editable per asset in the launchpad."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from automem_dagster.loop.settings import RoundSettings
from automem_dagster.metrics.paired import GatePolicy


class RoundConfig(dg.Config):
    """Small local defaults; raise them in the launchpad for a real round (AutoMem used full seed sets)."""

    rollout_episodes: int = Field(2, ge=1, description="training-seed episodes the meta-LLM diagnoses")
    rollout_max_steps: int = Field(10, ge=1, description="steps per diagnosis episode")
    eval_max_steps: int = Field(10, ge=1, description="steps per evaluation episode")
    eval_episodes: int | None = Field(2, ge=1, description="first k evaluation seeds; null for the whole fixed set")
    concurrency: int = Field(2, ge=1, description="episodes played at once (per shard)")
    shards: int = Field(1, ge=1, description="seed shards of each batch the asset plays, each its own step (a process "
                                             "or pod with a multiprocess or Kubernetes executor); keep 1 with the "
                                             "embedded model, whose server each shard would start again")
    shard_size: int | None = Field(None, ge=1, description="seeds per shard instead of a shard count (a batch of N "
                                                           "seeds makes ceil(N / shard_size) steps); null: `shards`")
    max_attempts: int = Field(3, ge=1, description="meta-LLM attempts per diagnosis or revision")
    gate: str = Field("significant", description="keep rule (kept, rolled back or inconclusive): significant (beyond "
                                                 "chance and the noise floor), higher_mean (AutoMem's) or equal_score "
                                                 "(also: not worse, and gate_metric lower beyond chance)")
    gate_level: float = Field(0.05, gt=0, lt=1, description="significant/equal_score: one-sided p-value to beat")
    gate_min_seeds: int = Field(5, ge=1, description="significant/equal_score: fewest paired seeds it keeps on")
    gate_metric: str | None = Field(None, description="equal_score: input_tokens_per_step, unproductive_action_rate, "
                                                      "redundant_write_rate or empty_search_rate (lower is better)")
    gate_margin: float = Field(0.1, ge=0, lt=1, description="equal_score: how far below 0 the lower bound may be, as a "
                                                            "share of the champion's score (at least the noise floor)")
    gate_min_gain: float = Field(5.0, gt=0, description="the smallest gain worth having, in progression points")
    seed_block: int | None = Field(None, ge=0, description="which block of rollout_episodes training seeds to play; "
                                                           "null: the loop's rule (a fresh block per challenger)")

    @classmethod
    def of(cls, settings: RoundSettings, **fields) -> RoundConfig:
        """The run config of a round with ``settings`` (a CLI round), plus ``fields`` of a subclass."""
        gate = settings.gate
        return cls(rollout_episodes=settings.rollout_episodes, rollout_max_steps=settings.rollout_max_steps,
                   eval_max_steps=settings.eval_max_steps, eval_episodes=settings.eval_episodes,
                   concurrency=settings.concurrency, max_attempts=settings.max_attempts, gate=gate.rule,
                   gate_level=gate.level, gate_min_seeds=gate.min_seeds, gate_metric=gate.metric,
                   gate_margin=gate.margin, gate_min_gain=gate.min_gain, seed_block=settings.seed_block, **fields)

    def gate_policy(self) -> GatePolicy:
        return GatePolicy(self.gate, self.gate_level, self.gate_min_seeds, self.gate_metric, self.gate_margin,
                          self.gate_min_gain)

    def shard_plan(self) -> dict[str, int]:
        """How ``rollout.shards.plan_shards`` splits each batch: by ``shard_size`` when set, else in ``shards``."""
        return {"shard_size": self.shard_size} if self.shard_size else {"shard_count": self.shards}

    def sharding(self) -> str:
        return f"shards of {self.shard_size} seeds" if self.shard_size else f"{self.shards} shard(s)"

    def settings(self, game: str) -> RoundSettings:
        return RoundSettings(game, self.rollout_episodes, self.rollout_max_steps, self.eval_max_steps,
                             self.eval_episodes, self.concurrency, self.max_attempts, self.gate_policy(),
                             self.seed_block)


def default_run_config(assets: tuple[str, ...], config: dg.Config) -> dg.RunConfig:
    """A round job's run config with ``config``'s documented defaults for each of its ``assets``, so
    the launchpad opens prefilled (every field shown, ready to raise) instead of offering "Add config"."""
    return dg.RunConfig(ops={asset: config for asset in assets})
