"""The budget of a proficiency round as run config: the core's options model (``loop/settings.ProficiencyOptions``,
where every default lives) with the shards of a structure round's config."""

from __future__ import annotations

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.loop.settings import ProficiencyOptions


class ProficiencyConfig(ProficiencyOptions, RoundConfig):
    """A proficiency round's options (``ProficiencyOptions``: rollouts and evaluation as in the structure loop,
    then curation and training) and the batch's shards; raise them in the launchpad for a real round."""
