"""Key and door: one fact to keep among look-alikes, and one choice that needs it.

A sign one step into the hallway says once which wing (west or east) holds the key, then crumbles;
further on, decoys (rumours and notes about other keys, in random wings) say other wings. At the
junction the observation asks once ``Which way on for the key? west or east.``: the right wing gives
the key (progression 0.5) and a passage to the door, which opens with it (1.0); the wrong wing ends
the episode. Any other action walks on in the hallway and the passage, so nothing but memory
decides. A note of everything holds the decoys too, written after the sign: an agent that trusts
its latest note about a key then goes wrong about as often as one that kept nothing.

Knobs: ``hall`` (steps from the start to the junction, at least ``decoys + 2``) and ``decoys``:
``keydoor:hall8-decoys3``; ``keydoor`` is ``keydoor:hall4-decoys2``.
"""

from __future__ import annotations

import random

from automem_dagster.games.recall import NeededFact, RecallGame, canonical_name, knob_task, parse_knobs, question

DEFAULTS = {"hall": 4, "decoys": 2}
MINIMUM = {"hall": 2, "decoys": 0}
WINGS = ("west", "east")
ACTIONS = {"forward": "walk on", "west": "enter the west wing", "east": "enter the east wing",
           "open": "open a door in front of you"}
PASSAGE = 3
"""Steps from the key to the door."""
DECOYS = ("Scratched on the wall: an old key was lost in the {wing} wing long ago.",
          "A guard's note: the spare key hangs in the {wing} wing's guardroom, which is locked for good.",
          "A child's chalk drawing shows a key in the {wing} wing.",
          "A notice: keys found in the {wing} wing belong to the gardener.")
"""Facts about other keys: true in the story, useless for the door. Lower case wings, unlike the sign."""


def knobs(task: str) -> dict[str, int]:
    """The hall length and decoy count a task names; the hall must hold the sign and every decoy."""
    found = parse_knobs("keydoor", task, DEFAULTS, MINIMUM)
    if found["hall"] < found["decoys"] + 2:
        raise ValueError(f"game 'keydoor:{task}': the hall holds the sign and {found['decoys']} decoys before the "
                         f"junction, so hall must be at least {found['decoys'] + 2}")
    return found


canonical = canonical_name("keydoor", knobs)


class KeyDoorGame(RecallGame):
    """Stages ``hall`` (positions 0..hall-1), ``junction``, ``wing`` (the key taken), ``door``, ``goal``
    (the door opened) and ``lost`` (the wrong wing)."""

    stages = ("hall", "junction", "wing", "door", "goal", "lost")

    def __init__(self, task: str, max_steps: int | None) -> None:
        self.knobs = knobs(task)
        name = f"keydoor:{knob_task(self.knobs)}"
        super().__init__(name, ACTIONS, max_steps or self.knobs["hall"] + PASSAGE + 10)

    def _start(self, seed: int) -> str:
        rng = random.Random(seed)
        self.wing = rng.choice(WINGS)
        self.decoys = [DECOYS[i % len(DECOYS)].format(wing=rng.choice(WINGS)) for i in range(self.knobs["decoys"])]
        self.stage = "hall"
        return "[hall] You stand at the start of a long hallway. The door is far ahead, out of sight."

    def needed_facts(self) -> list[NeededFact]:
        return [NeededFact(self._sign(), "the key", self.wing, WINGS)]

    def inventory(self) -> dict[str, int]:
        return {"key": 1} if self.progression else {}

    def _sign(self) -> str:
        return f"A sign on the wall reads: the key lies in the {self.wing.upper()} wing."

    def _advance(self, action: str) -> str:
        return getattr(self, f"_{self.stage}")(action)

    def _hall(self, action: str) -> str:
        self.at += 1
        if self.at == 1:
            return f"[hall] {self._sign()} It crumbles to dust as you read it."
        if self.at - 2 < len(self.decoys):
            return f"[hall] {self.decoys[self.at - 2]}"
        if self.at < self.knobs["hall"]:
            return "[hall] The hallway goes on."
        self.stage = "junction"
        return f"[junction] You reach a junction: wings open to the west and east. The door is not in sight. {self._ask()}"

    def _ask(self) -> str:
        return question("the key", list(WINGS))

    def _junction(self, action: str) -> str:
        if action == self.wing:
            self.stage, self.at, self.progression = "wing", 0, 0.5
            return "[wing] You find the key and take it. A passage leads on towards the door."
        if action in WINGS:
            self.stage, self.over = "lost", True
            return "[lost] That wing is empty, and its gate falls shut behind you: the key is out of reach."
        return f"[junction] A wall blocks the way; wings open to the west and east. {self._ask()}"

    def _wing(self, action: str) -> str:
        self.at += 1
        if self.at < PASSAGE:
            return "[wing] The passage goes on."
        self.stage = "door"
        return "[door] A heavy door stands in front of you."

    def _door(self, action: str) -> str:
        self.stage, self.progression, self.over = "goal", 1.0, True
        return "[goal] The key turns and the door opens: you reached the goal."


def make(task: str, max_steps: int | None) -> KeyDoorGame:
    return KeyDoorGame(task, max_steps)
