"""The paper's table (``automem table``) on the champion's Dagster page, as an observation.

The table compares versions already played (or plays them on the fixed seeds); it is a reading of the
champion, not a step of a round, so it is recorded as an ``AssetObservation`` of the game's
``champion_scaffold`` partition, carrying the table and its figure, in the instance ``make dagster``
opens (``defs/cli_rounds.project_instance``).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from automem_dagster.defs.cli_rounds import project_instance
from automem_dagster.defs.execution.partitions import game_partitions
from automem_dagster.loop.paper_table import PaperTable
from automem_dagster.loop.storage import slug
from automem_dagster.plots import png_markdown


def report_paper_table(table: PaperTable) -> str:
    """Record ``table`` on the champion's page; returns a line saying where it shows."""
    key = slug(table.game)
    if key not in game_partitions.get_partition_keys():
        return f"Dagster: {table.game} is not one of the game partitions, so the table is not shown there"
    metadata = {"first": f"v{table.first_version}", "final": f"v{table.final_version}",
                "seeds": ", ".join(map(str, table.seeds)), "max_steps": table.max_steps,
                "paper_table": dg.MetadataValue.md(table.markdown()),
                "paper_figure": dg.MetadataValue.md(png_markdown(Path(table.files["figure"]), "the paper's table")),
                "paper_table_json": dg.MetadataValue.path(table.files["json"])}
    with project_instance() as instance:
        instance.report_runless_asset_event(dg.AssetObservation(asset_key="champion_scaffold", partition=key,
                                                                metadata=metadata))
    return f"Dagster: the table is shown on champion_scaffold ({key}), as an observation (make dagster)"
