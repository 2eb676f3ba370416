"""Game adapters behind one factory: ``make_game("crafter" | "nethack" | "minihack:<Task>" | "babyai:<Task>" | ...)``.

Every game belongs to a registered environment family (``games.plugin``): the built-in ones and
those installed plugins add through an entry point. ``env_ref`` resolves a name once into its
family, task and plugin; ``game_family`` is its family. The adapters import their simulators
only when constructed, so importing this package stays cheap. A MiniHack suite
("minihack:suite", or tasks joined by '+') is one game over several tasks (``games.minihack_suite``).
"""

from __future__ import annotations

from automem_dagster.games.base import Game, GameState, ParsedAction, StepResult
from automem_dagster.games.builtin import BALROG_MINIHACK_TASKS, minihack_env_id, minihack_suite_tasks
from automem_dagster.games.plugin import (
    Environment,
    EnvRef,
    PluginError,
    as_ref,
    env_ref,
    environment,
    environments,
    families,
)

__all__ = [
    "BALROG_MINIHACK_TASKS",
    "EnvRef",
    "Environment",
    "Game",
    "GameState",
    "ParsedAction",
    "PluginError",
    "StepResult",
    "as_ref",
    "env_ref",
    "environment",
    "environments",
    "families",
    "game_family",
    "make_game",
    "minihack_env_id",
    "minihack_suite_tasks",
]


def game_family(name: str | EnvRef) -> str:
    """The family a game name belongs to ("crafter", "minihack:Corridor-R3" -> "minihack"); no env is built."""
    return as_ref(name).family


def make_game(name: str | EnvRef, max_steps: int | None = None) -> Game:
    """Build the adapter for ``name``; ``max_steps`` overrides the game's default episode budget.

    Defaults: Crafter 2000, MiniHack 100, NetHack 100,000 agent steps, BabyAI the level's own
    limit, TextWorld 80 (BALROG's). A game is named by its canonical reference name
    ("minihack:Corridor-R3" whichever MiniHack spelling was given), so results and scaffolds key
    on one name per task.
    """
    return as_ref(name).make(max_steps)
