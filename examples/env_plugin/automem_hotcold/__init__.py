"""Hot and cold: find the buried coin on a line of squares; each step says warmer or colder."""

from __future__ import annotations

import random
from pathlib import Path

from automem_dagster.games.actions import ActionVocabulary, VocabularyGame
from automem_dagster.games.base import GameState, StepResult, world_digest
from automem_dagster.games.plugin import Environment

ACTIONS = {"step_left": "move one square left", "step_right": "move one square right",
           "dig": "dig for the coin on this square"}


class HotColdGame(VocabularyGame):
    """A line of ``length`` squares; the seed places you and the coin. ``VocabularyGame`` gives
    ``actions()``, ``parse_action()`` and ``close()`` from the ``ActionVocabulary``."""

    default_action = "dig"
    packages = ("automem-hotcold",)  # only this package's code decides the worlds

    def __init__(self, length: int, max_steps: int | None) -> None:
        self.name, self.length, self.max_steps = f"hotcold:line{length}", length, max_steps or 3 * length
        self._vocabulary = ActionVocabulary(dict(ACTIONS), self.default_action, {"left": ("step_left",),
                                            "right": ("step_right",), "search": ("dig",)})

    def reset(self, seed: int) -> StepResult:
        rng = random.Random(seed)
        self.coin, self.at = rng.randrange(self.length), rng.randrange(self.length)
        self.steps, self.found = 0, False
        self.first = self._result("You stand on a line of squares. Somewhere a coin is buried.", 0.0)
        return self.first

    def world_fingerprint(self) -> str:
        return world_digest(self.first, f"{self.length}:{self.coin}".encode())

    def step(self, action: str) -> StepResult:
        before = abs(self.at - self.coin)
        self.steps += 1
        if action == "dig":
            self.found = self.at == self.coin
            return self._result("You found the coin!" if self.found else "Nothing here.", float(self.found))
        self.at = min(max(self.at + (1 if action == "step_right" else -1), 0), self.length - 1)
        after = abs(self.at - self.coin)
        return self._result("Warmer." if after < before else "Colder." if after > before else "The same.", 0.0)

    def _result(self, text: str, reward: float) -> StepResult:
        done = self.found or self.steps >= self.max_steps
        state = GameState(position=(self.at, 0), inventory={"coin": 1} if self.found else {}, vitals={})
        return StepResult(f"{text} You are on square {self.at + 1} of {self.length}.", reward, done,
                          1.0 if self.found else 0.0, state, {"step": self.steps})


def make(task: str, max_steps: int | None) -> HotColdGame:
    if not task.startswith("line") or not task[4:].isdigit() or int(task[4:]) < 2:
        raise ValueError(f"unknown task 'hotcold:{task}': use hotcold:line<N> with N >= 2, e.g. hotcold:line12")
    return HotColdGame(int(task[4:]), max_steps)


ENVIRONMENT = Environment(
    family="hotcold", make=make, scaffold=Path(__file__).with_name("scaffold_v0.yaml"),
    eval_seeds=(42, 43, 44, 45, 46), tasks=("line12",),
    goal="You are looking for a coin buried on a line of squares. Walk towards it (warmer) and dig where it is.",
)
"""What the entry point names: the family, the factory, the v0 scaffold, the seeds and the goal."""
