"""Key and door: a game where memory provably matters, to check curation against a known answer.

A sign in the hallway says once which wing (west or east) holds the key, then crumbles; the
hallway ends at a junction from which the door is out of sight, and the door opens only with
the key. An agent that did not keep the sign's words cannot know which wing to enter, so a
note of the key's wing (and a read that shows it at the junction) is the decision that makes
the difference, and any other note is junk. ``tests/contract/test_counterfactual.py`` plays it with the
scripted model of ``automem_dagster.standins.keydoor_rules``.
"""

from __future__ import annotations

import random
from pathlib import Path

from automem_dagster.games.actions import ActionVocabulary, VocabularyGame
from automem_dagster.games.base import GameState, StepResult, world_digest
from automem_dagster.games.plugin import Environment

ACTIONS = {"forward": "walk on", "west": "enter the west wing", "east": "enter the east wing",
           "open": "open a door in front of you"}
HALL = 5
"""Steps from the start to the junction; the sign is one step in."""
PASSAGE = 3
"""Steps from the key's wing to the door."""


class KeyDoorGame(VocabularyGame):
    """Stages: ``hall`` (positions 0..HALL-1), ``junction``, ``wing`` (positions 0..PASSAGE-1, the key
    taken), ``door``, ``goal``. Progression is 0.5 with the key and 1.0 through the door."""

    name = "keydoor"
    default_action = "forward"
    packages = ("automem-keydoor",)

    def __init__(self, max_steps: int | None) -> None:
        self.max_steps = max_steps or 24
        self._vocabulary = ActionVocabulary(dict(ACTIONS), self.default_action, {})

    def reset(self, seed: int) -> StepResult:
        self.wing = random.Random(seed).choice(("west", "east"))
        self.stage, self.at, self.steps, self.progression = "hall", 0, 0, 0.0
        self.first = self._result("[hall] You stand at the start of a long hallway. The door is far ahead, out of sight.")
        return self.first

    def world_fingerprint(self) -> str:
        return world_digest(self.first, self.wing.encode())

    def step(self, action: str) -> StepResult:
        self.steps += 1
        text = getattr(self, f"_{self.stage}")(action)
        return self._result(text)

    def _hall(self, action: str) -> str:
        if action != "forward":
            return "[hall] Walls on both sides; the hallway leads forward."
        self.at += 1
        if self.at == 1:
            return (f"[hall] A sign on the wall reads: the key lies in the {self.wing.upper()} wing. "
                    "It crumbles to dust as you read it.")
        if self.at < HALL:
            return "[hall] The hallway goes on."
        self.stage = "junction"
        return "[junction] You reach a junction: wings open to the west and east. The door is not in sight."

    def _junction(self, action: str) -> str:
        if action == self.wing:
            self.stage, self.at, self.progression = "wing", 0, 0.5
            return "[wing] You find the key and take it. A passage leads on towards the door."
        if action in ("west", "east"):
            return "[junction] That wing is empty; you walk back to the junction."
        return "[junction] A wall blocks the way; wings open to the west and east."

    def _wing(self, action: str) -> str:
        if action != "forward":
            return "[wing] The passage leads forward."
        self.at += 1
        if self.at < PASSAGE:
            return "[wing] The passage goes on."
        self.stage = "door"
        return "[door] A heavy door stands in front of you."

    def _door(self, action: str) -> str:
        if action != "open":
            return "[door] A heavy door stands in front of you."
        self.stage, self.progression = "goal", 1.0
        return "[goal] The key turns and the door opens: you reached the goal."

    def _result(self, text: str) -> StepResult:
        done = self.stage == "goal" or self.steps >= self.max_steps
        reward = 1.0 if self.stage == "goal" else 0.0
        state = GameState(position=(self.at, 0), inventory={"key": 1} if self.progression else {}, vitals={},
                          level={"stage": ("hall", "junction", "wing", "door", "goal").index(self.stage)})
        return StepResult(text, reward, done, self.progression, state, {"step": self.steps})


def make(task: str, max_steps: int | None) -> KeyDoorGame:
    return KeyDoorGame(max_steps)


ENVIRONMENT = Environment(
    family="keydoor", make=make, scaffold=Path(__file__).with_name("scaffold_v0.yaml"),
    eval_seeds=(900, 901), min_examples=1,
    goal="Find the key (a sign in the hallway says once which wing holds it), then open the far door.",
)
"""The entry point's record: the ground-truth game for checking curation against a known answer."""
