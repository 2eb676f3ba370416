"""Where Dagster keeps the values passed between steps: its pickling IO manager, with a short ``path``.

Dagster's filesystem IO manager records each output's absolute path as ``path`` metadata. A path does
not wrap on the asset page, and an absolute one (``/home/.../.dagster_home/storage/champion_scaffold/
crafter``) is wider than the value column, so it pushed every other value of the page past its right
edge (tests/e2e/test_ui_pages.py). Here ``path`` is the same file relative to the IO manager's base (the
instance's storage folder, or ``$AUTOMEM_IO_BASE``): ``champion_scaffold/crafter``.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from dagster._core.storage.fs_io_manager import PickledObjectFilesystemIOManager


class ShortPathPickles(PickledObjectFilesystemIOManager):
    """``PickledObjectFilesystemIOManager`` whose ``path`` metadata is relative to its base."""

    def get_metadata(self, context: dg.OutputContext, obj: Any) -> dict[str, dg.MetadataValue]:
        if obj is None:
            return {}
        # handle_output's own choice of path (dagster 1.13, upath_io_manager.py); the custom metadata
        # this returns replaces the absolute ``path`` it records.
        path = (next(iter(self._get_paths_for_partitions(context).values())) if context.has_asset_partitions
                else self._get_path(context))
        return {"path": dg.MetadataValue.path(str(path.relative_to(self._base_path)))}


class StepValuesIOManager(dg.FilesystemIOManager):
    """``FilesystemIOManager`` (the same ``base_dir`` config) making ``ShortPathPickles``."""

    def create_io_manager(self, context: dg.InitResourceContext) -> ShortPathPickles:
        return ShortPathPickles(base_dir=self.base_dir or context.instance.storage_directory())
