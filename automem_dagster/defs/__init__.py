"""Dagster definitions: a thin layer over the loop stages (``dagster dev`` loads ``defs`` from here).

One folder per domain: ``structure`` (the structure loop's assets, jobs, sensors, schedule),
``evaluation`` (fixed-seed evaluation and its gate) and ``proficiency`` (the proficiency loop:
dataset, LoRA specialist, its gate and decision); and what the domains share, one folder by what
it holds: ``plans`` (a loop's plan made into assets, the typed values they pass, checks, jobs and
sensors), ``execution`` (partitions, seed shards, Celery, run tags, the IO manager), ``metadata``
(what the asset pages show), ``common`` (the run config) and ``resources.py``. Every asset calls a function of
``automem_dagster.loop``; none holds logic of its own.
"""

from automem_dagster.defs.definitions import defs

__all__ = ["defs"]
