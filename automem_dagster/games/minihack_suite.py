"""A suite of MiniHack tasks played as one game, so an evaluation pairs on (task, seed).

A game pairs candidate and champion seed by seed; on one MiniHack task that is 5 pairs, and no
two-sided exact test on 5 pairs can reach p < 0.0625. A suite ("minihack:suite", the BALROG
tasks, or "minihack:Corridor-R3+MazeWalk-9x9") plays each (task, seed) as one *unit*, an int
that stands for the pair everywhere a seed does (batches, trajectories, resumes, the gate), so 8
tasks x 5 seeds give 40 pairs. Units are readable: ``100 * task_index + seed`` for an evaluation
seed (< 100), e.g. 142 is the second task on seed 42; a seed at or above ``100 * len(tasks)`` (the
training range) plays task ``seed % len(tasks)`` on that very seed. Both maps are one-to-one and
their task seeds never meet, so training units never replay an evaluation unit's world.

Each step's ``info`` names the task's gym id (``env_id``), so a trajectory says what it played.
Actions differ by task (Corridor-R3 11, MazeWalk 8, Quest 85), so ``actions()`` after ``reset``
are the current task's; before any reset they are the union over the suite (what a batch's
identity records as the suite's vocabulary).
"""

from __future__ import annotations

from collections.abc import Callable

from automem_dagster.games.base import Game, ParsedAction, StepResult

UNIT_SPAN = 100
"""Evaluation units are ``UNIT_SPAN * task_index + seed``; evaluation seeds must be below it."""


def suite_units(n_tasks: int, seeds: list[int]) -> list[int]:
    """The evaluation units of a suite of ``n_tasks`` tasks on ``seeds``, seed-major (every task on the
    first seed, then the second), so a prefix of the list still spreads over the tasks."""
    high = [s for s in seeds if not 0 <= s < UNIT_SPAN]
    if high:
        raise ValueError(f"MiniHack evaluation seeds {high} are not below {UNIT_SPAN}: a suite numbers each "
                         f"(task, seed) as {UNIT_SPAN} * task + seed, so keep eval.minihack seeds in 0..{UNIT_SPAN - 1}")
    return [UNIT_SPAN * task + seed for seed in seeds for task in range(n_tasks)]


def suite_unit(tasks: tuple[str, ...], unit: int) -> tuple[str, int]:
    """The (task, seed) a unit plays (module docstring)."""
    if unit < UNIT_SPAN * len(tasks):
        return tasks[unit // UNIT_SPAN], unit % UNIT_SPAN
    return tasks[unit % len(tasks)], unit


class MiniHackSuite:
    """The tasks of a suite, one episode at a time: ``reset(unit)`` resets the unit's task (built on first
    use and kept until ``close``, so fingerprinting 40 units builds 8 games, not 40) to the unit's seed;
    the rest is that task's game."""

    packages = ("minihack", "nle", "gymnasium", "numpy")

    def __init__(self, name: str, tasks: tuple[str, ...], make: Callable[[str], Game], max_steps: int) -> None:
        self.name, self.tasks, self.max_steps = name, tasks, max_steps
        self._make, self._games, self._game = make, {}, None

    @property
    def default_action(self) -> str:
        """The current task's ("search" where it has one, else "north"); "search" before any reset."""
        return self._game.default_action if self._game else "search"

    def actions(self) -> dict[str, str]:
        if self._game is not None:
            return self._game.actions()
        union = {}
        for task in self.tasks:
            union.update(self._task_game(task).actions())
        return union

    def parse_action(self, text: str) -> ParsedAction:
        return self._current().parse_action(text)

    def reset(self, seed: int) -> StepResult:
        task, task_seed = suite_unit(self.tasks, seed)
        self._game = self._task_game(task)
        return self._game.reset(task_seed)

    def world_fingerprint(self) -> str:
        return self._current().world_fingerprint()

    def step(self, action: str) -> StepResult:
        return self._current().step(action)

    def close(self) -> None:
        for game in self._games.values():
            game.close()
        self._games, self._game = {}, None

    def _task_game(self, task: str) -> Game:
        if task not in self._games:
            self._games[task] = self._make(task)
        return self._games[task]

    def _current(self) -> Game:
        if self._game is None:
            raise RuntimeError(f"{self.name}: reset(unit) first, which picks the task the episode plays")
        return self._game
