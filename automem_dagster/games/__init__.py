"""Game adapters behind one factory: ``make_game("crafter" | "nethack" | "minihack:<Task>")``.

Scaffolds (memory-file layouts) are kept per game family, so ``game_family`` maps any game
name to "crafter", "minihack" or "nethack" without building an environment. The adapters
import their simulators only when constructed, so importing this package stays cheap.
"""

from __future__ import annotations

import re

from automem_dagster.games.base import Game, GameState, ParsedAction, StepResult

GAME_FAMILIES = ("crafter", "minihack", "nethack")

BALROG_MINIHACK_TASKS = (
    "Boxoban-Hard",
    "Boxoban-Medium",
    "MazeWalk-9x9",
    "MazeWalk-15x15",
    "Corridor-R3",
    "CorridorBattle-Dark",
    "Quest-Easy",
    "Quest-Medium",
)
"""The MiniHack tasks of the BALROG benchmark (each ``MiniHack-<task>-v0``)."""

_MINIHACK_PREFIX = "minihack:"
_MINIHACK_ID = re.compile(r"^MiniHack-.+-v\d+$")

__all__ = [
    "BALROG_MINIHACK_TASKS",
    "GAME_FAMILIES",
    "Game",
    "GameState",
    "ParsedAction",
    "StepResult",
    "game_family",
    "make_game",
    "minihack_env_id",
]


def _choices() -> str:
    tasks = ", ".join(f"minihack:{task}" for task in BALROG_MINIHACK_TASKS)
    return f"'crafter', 'nethack', or 'minihack:<Task>' / a registered MiniHack gym id (BALROG tasks: {tasks})"


def game_family(name: str) -> str:
    """The family ("crafter", "minihack" or "nethack") a game name belongs to; no env is built."""
    key = name.strip()
    if key.lower() in ("crafter", "nethack"):
        return key.lower()
    if key.lower().startswith(_MINIHACK_PREFIX) or _MINIHACK_ID.match(key):
        return "minihack"
    raise ValueError(f"unknown game {name!r}: use {_choices()}")


def minihack_env_id(name: str) -> str:
    """Gym id for a MiniHack name: "minihack:Corridor-R3" -> "MiniHack-Corridor-R3-v0"; full ids pass through."""
    key = name.strip()
    if _MINIHACK_ID.match(key):
        return key
    if not key.lower().startswith(_MINIHACK_PREFIX):
        raise ValueError(f"{name!r} is not a MiniHack game name: use {_choices()}")
    task = key[len(_MINIHACK_PREFIX):].strip()
    if task.startswith("MiniHack-"):
        task = task[len("MiniHack-"):]
    return f"MiniHack-{task}" if re.search(r"-v\d+$", task) else f"MiniHack-{task}-v0"


def make_game(name: str, max_steps: int | None = None) -> Game:
    """Build the adapter for ``name``; ``max_steps`` overrides the game's default episode budget.

    Defaults: Crafter 2000, MiniHack 100, NetHack 100,000 agent steps. MiniHack adapters are
    named "minihack:<Task>" (the version suffix kept only when it is not -v0) whichever
    spelling was given, so results and scaffolds key on one name per task.
    """
    family = game_family(name)
    budget = {} if max_steps is None else {"max_steps": max_steps}
    if family == "crafter":
        from automem_dagster.games.crafter_game import CrafterGame

        return CrafterGame(**budget)
    if family == "nethack":
        from automem_dagster.games.nethack_game import NetHackGame

        return NetHackGame(**budget)
    env_id = minihack_env_id(name)
    import gymnasium as gym

    from automem_dagster.games.minihack_game import MiniHackGame, register_minihack

    register_minihack()
    if env_id not in gym.registry:
        raise ValueError(f"unknown game {name!r}: {env_id} is not a registered MiniHack env; use {_choices()}")

    short = env_id[len("MiniHack-"):].removesuffix("-v0")
    return MiniHackGame(env_id, name=f"minihack:{short}", **budget)
