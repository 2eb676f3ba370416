"""Full NetHack as a text game, with the NetHack Challenge settings and BALROG's progression.

``NetHackChallenge-v0`` refuses to be seeded, so the adapter rebuilds its settings on NLE's
score task, which accepts seeds: a random character ("@"), the full keyboard as actions, no
auto-answered questions or skipped menus, no time penalty and the score difference as reward.
Two rules come from BALROG: "--More--" is pressed automatically, and an episode ends after 150
consecutive agent steps on which the game's turn counter did not move (menus, prompts, walking
into walls). Progression is the running maximum of the table value of the deepest dungeon
level and the highest experience level reached.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from automem_dagster.games.nle_text import BL_DEPTH, BL_SCORE, BL_TIME, BL_XP, OBSERVATION_KEYS, NLEGame, TextStyle
from automem_dagster.games.progression import load_nethack_table, nethack_progression

NO_PROGRESS_LIMIT = 150
"""BALROG ends a NetHack episode after this many consecutive steps without the turn counter moving."""

_ENV_STEP_LIMIT = 10**9
"""The env's own limit, far above any budget: the adapter alone ends episodes on budget."""


class NetHackGame(NLEGame):
    """NetHack with NetHack Challenge settings, seedable; default budget 100,000 agent steps."""

    packages = ("nle", "numpy")

    def __init__(self, max_steps: int = 100_000) -> None:
        from nle import nethack  # imported here so that importing the games package stays cheap
        from nle.env.tasks import NetHackScore

        env = NetHackScore(
            character="@",
            actions=nethack.ACTIONS,
            allow_all_yn_questions=True,
            allow_all_modes=True,
            penalty_mode="constant",
            penalty_step=0.0,
            penalty_time=0.0,
            max_episode_steps=_ENV_STEP_LIMIT,
            observation_keys=OBSERVATION_KEYS,
            wizard=False,
            # Moon phase and Friday-13th luck otherwise follow the wall clock, which would make a
            # seed replay differently on another day; with seeds set NLE derives them from the seed.
            fix_moon_phase=True,
        )
        style = TextStyle(map_width=41, map_height=15, nearby_limit=12, full_status=True, show_inventory=True)
        super().__init__("nethack", env, max_steps, "esc", style)
        self._table = load_nethack_table()
        self._progression = 0.0
        self._last_turn = 0
        self._stalled_steps = 0
        self._max_depth = 1
        self._max_xp_level = 1
        self._score = 0

    def _start_episode(self, obs: dict[str, np.ndarray]) -> None:
        self._progression = 0.0
        self._stalled_steps = 0
        self._max_depth = 1
        self._max_xp_level = 1
        self._track(obs)

    def _record_step(self, obs: dict[str, np.ndarray] | None, rewards: list[float]) -> None:
        if obs is None:  # the game has ended; its final observation is zeroed
            return
        turn_before = self._last_turn
        self._track(obs)
        self._stalled_steps = self._stalled_steps + 1 if self._last_turn == turn_before else 0

    def _track(self, obs: dict[str, np.ndarray]) -> None:
        bl = obs["blstats"]
        depth, xp_level = int(bl[BL_DEPTH]), int(bl[BL_XP])
        self._last_turn = int(bl[BL_TIME])
        self._score = int(bl[BL_SCORE])
        self._max_depth = max(self._max_depth, depth)
        self._max_xp_level = max(self._max_xp_level, xp_level)
        self._progression = max(self._progression, nethack_progression(depth, xp_level, self._table))

    def _progress(self) -> float:
        return self._progression

    def _extra_end_reason(self) -> str | None:
        return "no_progress" if self._stalled_steps >= NO_PROGRESS_LIMIT else None

    def _extra_info(self) -> dict[str, Any]:
        return {
            "score": self._score,
            "max_depth": self._max_depth,
            "max_xp_level": self._max_xp_level,
            "steps_without_turn": self._stalled_steps,
        }
