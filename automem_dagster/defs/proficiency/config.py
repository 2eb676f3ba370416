"""The budget of a proficiency round as run config: the core's loop config (``loop/settings.ProficiencyConfig``,
where every default lives) mirrored for Dagster (``defs/common/config.run_config``), with the batch's shards."""

from __future__ import annotations

from automem_dagster.defs.common.config import Sharding, run_config
from automem_dagster.loop import settings

ProficiencyConfig = run_config(settings.ProficiencyConfig, Sharding)
"""A proficiency round's config (budget, gate, curation, training) and the batch's shards; raise its budget in the
launchpad for a real round."""
