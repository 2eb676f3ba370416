"""Partitions: one per game for a round, one per scaffold version for the lineage."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from automem_dagster.games import environments
from automem_dagster.loop.storage import slug

GAMES = tuple(env.default_game() for env in environments().values())
"""The games a round runs on, one per registered environment (an installed plugin's too); partition
keys are their path slugs (``minihack-Corridor-R3``)."""

game_partitions = dg.StaticPartitionsDefinition([slug(game) for game in GAMES])

scaffold_versions = dg.DynamicPartitionsDefinition(name="scaffold_versions")
"""Keys ``<family>-v<N>`` (``crafter-v1``), added when a candidate is registered."""


def game_of(partition_key: str) -> str:
    """The game name of a game partition key: ``minihack-Corridor-R3`` -> ``minihack:Corridor-R3``."""
    for game in GAMES:
        if slug(game) == partition_key:
            return game
    raise ValueError(f"unknown game partition {partition_key!r}: expected one of {[slug(g) for g in GAMES]}")


def version_key(family: str, version: int) -> str:
    return f"{family}-v{version}"


def parse_version_key(partition_key: str) -> tuple[str, int]:
    """``crafter-v1`` -> ("crafter", 1)."""
    family, sep, number = partition_key.rpartition("-v")
    if not sep or not family or not number.isdigit():
        raise ValueError(f"scaffold version partition {partition_key!r} is not <family>-v<N>, e.g. crafter-v1")
    return family, int(number)


def ensure_version_partition(instance: dg.DagsterInstance, family: str, version: int) -> str:
    """Add the ``scaffold_versions`` key of a version if it is not there yet; returns the key."""
    key = version_key(family, version)
    if not instance.has_dynamic_partition(scaffold_versions.name, key):
        instance.add_dynamic_partitions(scaffold_versions.name, [key])
    return key


@contextmanager
def partitioned_checks() -> Iterator[None]:
    """Where the game-partitioned asset checks are defined: Dagster 1.13 warns that a check's
    ``partitions_def`` is a preview feature on every load. The checks need it (each game's gate
    is its own result), a user can do nothing about it, so exactly that warning is silenced here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec",
                                category=dg.PreviewWarning)
        yield
