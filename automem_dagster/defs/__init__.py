"""Dagster definitions: a thin layer over the loop stages (``dagster dev`` loads ``defs`` from here).

One folder per domain: ``common`` (resources, partitions, run config, sensor helpers),
``structure`` (the structure loop's assets, jobs, sensors, schedule), ``evaluation``
(fixed-seed evaluation and its gate) and ``proficiency`` (the proficiency loop: dataset,
LoRA specialist, its gate and decision). Every asset calls a function of
``automem_dagster.loop``; none holds logic of its own.
"""

from automem_dagster.defs.definitions import defs

__all__ = ["defs"]
