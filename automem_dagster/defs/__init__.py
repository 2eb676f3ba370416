"""Dagster definitions: a thin layer over the loop stages (``dagster dev`` loads ``defs`` from here).

One folder per domain: ``common`` (resources, partitions, run config), ``structure`` (the
structure loop's assets, jobs, sensors, schedule) and ``evaluation`` (fixed-seed evaluation
and its gate). Every asset calls a function of ``automem_dagster.loop``; none holds logic of
its own.
"""

from automem_dagster.defs.definitions import defs

__all__ = ["defs"]
