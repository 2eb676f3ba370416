"""MiniHack tasks as text games, with BALROG's settings and progression.

BALROG builds each task with a random character ("@"), autopickup off, the standard time
penalty (-0.01 per step on which the game clock does not move) and a 100-step budget, and
counts an episode as solved (progression 1.0) once a step pays a reward of at least 1.0.
AutoMem's default action for unparseable output is "search" (BALROG uses "north").
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from automem_dagster.games.nle_text import ITEM_COMMANDS, OBSERVATION_KEYS, NLEGame, TextStyle
from automem_dagster.games.progression import minihack_progression

_ENV_STEP_LIMIT = 10**6
"""The env's own limit, far above any budget: the adapter alone ends episodes on budget."""


def register_minihack() -> None:
    """Import minihack, which registers its ids with gymnasium. minihack 1.0.2 imports
    ``pkg_resources``, whose deprecation warning (setuptools<81 is pinned for it) would reach a
    user's first run as noise; only that warning is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        import minihack  # noqa: F401


class MiniHackGame(NLEGame):
    """One MiniHack task, e.g. ``MiniHackGame("MiniHack-Corridor-R3-v0")``."""

    packages = ("minihack", "nle", "gymnasium", "numpy")

    def __init__(self, env_id: str, max_steps: int = 100, name: str | None = None) -> None:
        import gymnasium as gym  # imported here so that importing the games package stays cheap

        register_minihack()

        env = gym.make(
            env_id,
            observation_keys=OBSERVATION_KEYS,
            character="@",
            autopickup=False,
            penalty_mode="constant",
            penalty_step=-0.01,
            penalty_time=0.0,
            max_episode_steps=_ENV_STEP_LIMIT,
            # Moon phase and Friday-13th luck otherwise follow the wall clock, which would make a
            # seed replay differently on another day; with seeds set NLE derives them from the seed.
            fix_moon_phase=True,
            disable_env_checker=True,
        ).unwrapped
        names = {getattr(action, "name", "").lower() for action in env.actions}
        style = TextStyle(
            map_width=21,
            map_height=11,
            nearby_limit=6,
            full_status=False,
            show_inventory=bool(names & ITEM_COMMANDS),
        )
        super().__init__(name or env_id, env, max_steps, "search" if "search" in names else "north", style)
        self.env_id = env_id
        self._solved = False

    def _start_episode(self, obs: dict[str, np.ndarray]) -> None:
        self._solved = False

    def _record_step(self, obs: dict[str, np.ndarray] | None, rewards: list[float]) -> None:
        self._solved = self._solved or any(r >= 1.0 for r in rewards)

    def _progress(self) -> float:
        return minihack_progression(self._solved)

    def _extra_info(self) -> dict[str, Any]:
        return {"solved": self._solved, "env_id": self.env_id}
