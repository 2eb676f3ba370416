"""Scaffolds as data: the pydantic model and its YAML files (load, validate, save, hash, diff)."""

from automem_dagster.scaffold.io import (
    DEFAULT_ROOT,
    ScaffoldError,
    content_hash,
    diff_scaffolds,
    list_versions,
    load_scaffold,
    load_scaffold_file,
    parse_scaffold,
    revision_changes,
    save_scaffold,
    scaffold_path,
    scaffold_yaml,
    structural_changes,
)
from automem_dagster.scaffold.model import Limits, MemoryFile, Routine, Scaffold, Signals

__all__ = [
    "DEFAULT_ROOT", "Limits", "MemoryFile", "Routine", "Scaffold", "ScaffoldError", "Signals", "content_hash",
    "diff_scaffolds", "list_versions", "load_scaffold", "load_scaffold_file", "parse_scaffold",
    "revision_changes", "save_scaffold", "scaffold_path", "scaffold_yaml", "structural_changes",
]
