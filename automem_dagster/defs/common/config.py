"""The budget of a round as run config, editable per asset in the launchpad: the core's options model
itself (``loop/settings.StructureOptions``, where every default and help text lives) plus how Dagster
splits a batch into steps."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from automem_dagster.loop.settings import StructureOptions


class RoundConfig(dg.Config, StructureOptions):
    """A structure round's options (``StructureOptions``), and the batch's shards, which only Dagster has."""

    shards: int = Field(1, ge=1, description="seed shards of each batch the asset plays, each its own step (a process "
                                             "or pod with a multiprocess or Kubernetes executor); keep 1 with the "
                                             "embedded model, whose server each shard would start again")
    shard_size: int | None = Field(None, ge=1, description="seeds per shard instead of a shard count (a batch of N "
                                                           "seeds makes ceil(N / shard_size) steps); null: `shards`")

    def shard_plan(self) -> dict[str, int]:
        """How ``rollout.shards.plan_shards`` splits each batch: by ``shard_size`` when set, else in ``shards``."""
        return {"shard_size": self.shard_size} if self.shard_size else {"shard_count": self.shards}

    def sharding(self) -> str:
        return f"shards of {self.shard_size} seeds" if self.shard_size else f"{self.shards} shard(s)"


def default_run_config(assets: tuple[str, ...], config: dg.Config) -> dg.RunConfig:
    """A round job's run config with ``config``'s documented defaults for each of its ``assets``, so
    the launchpad opens prefilled (every field shown, ready to raise) instead of offering "Add config"."""
    return dg.RunConfig(ops={asset: config for asset in assets})
