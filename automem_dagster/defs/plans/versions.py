"""Data versions from the content hashes the project computes, and the ``scaffold_version`` partitions.

A scaffold's data version is its content hash (``scaffold.content_hash``), ``champion_scaffold``'s
is its champion's, and a dataset's is its ``dataset_hash``: so after a new champion Dagster marks
what was made from the old one (the proficiency round) stale. ``scaffold_version`` holds one
partition per version that exists, whatever made it (a Dagster run or the CLI): each is recorded
as a materialization with its YAML and fate when it is made and when it is decided.
"""

from __future__ import annotations

import warnings

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_IS_USER_PROVIDED_TAG, DATA_VERSION_TAG

from automem_dagster.defs.execution.partitions import ensure_version_partition, scaffold_versions, version_key
from automem_dagster.defs.metadata.structure import scaffold_version_metadata
from automem_dagster.loop.storage import Storage
from automem_dagster.scaffold import content_hash, load_scaffold


def scaffold_data_version(storage: Storage, family: str, version: int) -> dg.DataVersion:
    return dg.DataVersion(content_hash(load_scaffold(family, version, storage.scaffolds)))


def champion_data_version(storage: Storage, family: str) -> dg.DataVersion:
    """The data version of ``champion_scaffold``: the content hash of the champion in service."""
    return scaffold_data_version(storage, family, storage.load_lineage(family).champion().version)


def versioned_output(value: object, metadata: dict, version: dg.DataVersion) -> dg.Output:
    """An asset's ``Output`` with its data version. Dagster 1.13 flags ``Output``'s ``data_version``
    as beta on every materialization; staleness rests on it and a user can do nothing about the
    warning, so exactly that warning is silenced here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Parameter `data_version`", category=dg.BetaWarning)
        return dg.Output(value, metadata=metadata, data_version=version)


def data_version_tags(version: dg.DataVersion) -> dict[str, str]:
    """The tags that give a runless materialization its data version, as a run's would carry."""
    return {DATA_VERSION_TAG: version.value, DATA_VERSION_IS_USER_PROVIDED_TAG: "true"}


def scaffold_version_event(instance: dg.DagsterInstance, storage: Storage, family: str, version: int,
                           extra: dict | None = None) -> dg.AssetMaterialization:
    """A ``scaffold_version`` materialization of ``version`` (its partition added if new)."""
    return dg.AssetMaterialization(
        asset_key="scaffold_version", partition=ensure_version_partition(instance, family, version),
        metadata={**scaffold_version_metadata(storage, family, version), **(extra or {})},
        tags=data_version_tags(scaffold_data_version(storage, family, version)))


def record_scaffold_versions(instance: dg.DagsterInstance, storage: Storage, family: str, versions: list[int],
                             only_new: bool = False) -> str:
    """Record ``versions`` as they are now (made or decided by a run), or with ``only_new`` those
    that have no partition yet; returns their partition keys."""
    keys = []
    for version in versions:
        if only_new and instance.has_dynamic_partition(scaffold_versions.name, version_key(family, version)):
            keys.append(version_key(family, version))
            continue
        event = scaffold_version_event(instance, storage, family, version)
        instance.report_runless_asset_event(event)
        keys.append(event.partition)
    return ", ".join(keys)
