"""BALROG progression rules as pure functions.

Progression is the one number every experiment is judged by, so it lives apart from the
environment adapters: the adapters feed it raw facts (achievements, a solved flag, depth and
experience level) and tests can check the rules on constructed cases without running a game.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

CRAFTER_ACHIEVEMENT_COUNT = 22
"""Crafter defines 22 achievements; BALROG divides by this fixed number, not by what was seen."""


def crafter_progression(achievements: dict[str, int]) -> float:
    """Share of Crafter's 22 achievements unlocked at least once (count > 0)."""
    unlocked = sum(1 for count in achievements.values() if count > 0)
    return unlocked / CRAFTER_ACHIEVEMENT_COUNT


def minihack_progression(solved: bool) -> float:
    """1.0 once any step of the episode paid a reward of at least 1.0 (the task was solved), else 0.0."""
    return 1.0 if solved else 0.0


@lru_cache(maxsize=1)
def _nethack_table() -> dict[str, float]:
    text = resources.files("automem_dagster.games").joinpath("data/nethack_progression_table.json").read_text()
    return {str(key): float(value) for key, value in json.loads(text).items()}


def load_nethack_table() -> dict[str, float]:
    """BALROG's table of P(win | reached this level), keyed ``Dlvl:<depth>`` and ``Xp:<level>``.

    A fresh copy each call, so a caller that edits it cannot change what others read.
    """
    return dict(_nethack_table())


def nethack_progression(depth: int, xp_level: int, table: dict[str, float]) -> float:
    """Progression value of one NetHack state: the larger of its dungeon-depth and experience-level entries.

    Levels missing from the table count as 0. An episode's progression is the running maximum of
    this value over its steps; the NetHack adapter keeps that maximum.
    """
    return max(table.get(f"Dlvl:{depth}", 0.0), table.get(f"Xp:{xp_level}", 0.0))
