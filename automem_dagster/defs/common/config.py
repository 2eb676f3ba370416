"""A round's run config, editable per asset in the launchpad: the core's loop config itself
(``loop/settings.StructureConfig`` and ``ProficiencyConfig``, where every default and help text lives), its
parts as nested sections (``budget``, ``gate``, ``curation`` with its ``replay``, ``training``), plus how Dagster
splits a batch into steps.

Dagster's config schema takes nested models only where they are ``dagster.Config`` classes, and the core
imports no Dagster, so each part is mirrored here by a generated subclass of both (``run_config``): the schema
comes from the core's fields, and the config an asset receives *is* a core config (``isinstance`` holds), which
``for_game`` binds to the partition's game for the core to run on as it is.
"""

from __future__ import annotations

from functools import cache

import dagster as dg
from pydantic import BaseModel, Field, create_model

from automem_dagster.loop.settings import StructureConfig
from automem_dagster.options import is_part


class Sharding(dg.Config):
    """How a round's batches are split into steps, which only Dagster has."""

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


@cache
def run_config(model: type[BaseModel], base: type[dg.Config] = dg.Config) -> type:
    """``model`` as a ``dagster.Config`` (with ``base``'s own fields): a subclass of both whose parts are their
    own mirrors, with the part's defaults, so the launchpad shows every option of every part, prefilled."""
    parts = {name: (run_config(field.annotation), Field(default_factory=run_config(field.annotation),
                                                         description=(field.annotation.__doc__ or "").split("\n")[0]))
             for name, field in model.model_fields.items() if is_part(field.annotation)}
    return create_model(model.__name__, __base__=(base, model), __module__=__name__, __doc__=model.__doc__, **parts)


RoundConfig = run_config(StructureConfig, Sharding)
"""A structure round's config (``StructureConfig``: budget and gate) and the batch's shards (the proficiency
round's: ``defs/proficiency/config.py``)."""


def default_run_config(assets: tuple[str, ...], config: dg.Config) -> dg.RunConfig:
    """A round job's run config with ``config``'s documented defaults for each of its ``assets``, so
    the launchpad opens prefilled (every field shown, ready to raise) instead of offering "Add config"."""
    return dg.RunConfig(ops={asset: config for asset in assets})
