"""Courier: several facts to keep, each needed once, after a walk.

At the depot the courier loads parcels one per step, each label shown once (``Parcel 2's label:
deliver to the FARM.``). A road follows, whose billboards name the same places. Then one crossroads
per parcel, in order, asks once ``Which way on for parcel 2? mill, farm or dock.``: the right place
delivers it, a wrong one loses it. Progression is the share of parcels delivered. Any other action
walks on (at a crossroads it waits), so only memory decides; unlike key and door, every label is
needed, so a memory must keep several facts apart over the walk.

Knobs: ``walk`` (road steps between the depot and the first crossroads) and ``parcels`` (1 to 6):
``courier:walk6-parcels4``; ``courier`` is ``courier:walk3-parcels3``.
"""

from __future__ import annotations

import random

from automem_dagster.games.recall import NeededFact, RecallGame, canonical_name, knob_task, parse_knobs, question

DEFAULTS = {"walk": 3, "parcels": 3}
MINIMUM = {"walk": 0, "parcels": 1}
MOST_PARCELS = 6
PLACES = ("mill", "farm", "dock")
ACTIONS = {"forward": "walk on", **{p: f"take the road to the {p}" for p in PLACES}}
BILLBOARDS = ("A billboard: fresh bread at the {place} today!", "A billboard: the {place} is hiring.",
              "A billboard: dance at the {place} tonight.", "A signpost points the long way round to the {place}.")
"""Distractors on the road: they name the places, never a parcel."""


def knobs(task: str) -> dict[str, int]:
    """The walk length and parcel count a task names."""
    found = parse_knobs("courier", task, DEFAULTS, MINIMUM)
    if found["parcels"] > MOST_PARCELS:
        raise ValueError(f"game 'courier:{task}': parcels must be at most {MOST_PARCELS}, got {found['parcels']}")
    return found


canonical = canonical_name("courier", knobs)


class CourierGame(RecallGame):
    """Stages ``depot`` (a label per step), ``road``, ``stop`` (one crossroads per parcel), ``done``."""

    stages = ("depot", "road", "stop", "done")

    def __init__(self, task: str, max_steps: int | None) -> None:
        self.knobs = knobs(task)
        name = f"courier:{knob_task(self.knobs)}"
        super().__init__(name, ACTIONS, max_steps or self.knobs["walk"] + 2 * self.knobs["parcels"] + 6)

    def _start(self, seed: int) -> str:
        rng = random.Random(seed)
        self.places = [rng.choice(PLACES) for _ in range(self.knobs["parcels"])]
        self.boards = [BILLBOARDS[i % len(BILLBOARDS)].format(place=rng.choice(PLACES))
                       for i in range(self.knobs["walk"])]
        self.stage, self.parcel, self.delivered = "depot", 0, 0
        count = self.knobs["parcels"]
        return (f"[depot] {count} parcel{'s' if count > 1 else ''} wait for you at the depot. Each label is shown once, "
                "as you load the parcel. Walk on to load them.")

    def needed_facts(self) -> list[NeededFact]:
        return [NeededFact(self._label(k), f"parcel {k + 1}", place, PLACES) for k, place in enumerate(self.places)]

    def inventory(self) -> dict[str, int]:
        loaded = self.at if self.stage == "depot" else len(self.places)
        return {"parcel": loaded - self.parcel} if loaded - self.parcel else {}

    def _label(self, k: int) -> str:
        return f"Parcel {k + 1}'s label: deliver to the {self.places[k].upper()}."

    def _advance(self, action: str) -> str:
        return getattr(self, f"_{self.stage}")(action)

    def _depot(self, action: str) -> str:
        if self.at < len(self.places):
            self.at += 1
            return f"[depot] {self._label(self.at - 1)} You load it into your bag."
        self.stage, self.at = "road", 0
        return self._road(action)

    def _road(self, action: str) -> str:
        if self.at < len(self.boards):
            self.at += 1
            return f"[road] {self.boards[self.at - 1]}"
        self.stage = "stop"
        return f"[stop] You reach a crossroads with roads to the mill, the farm and the dock. {self._ask()}"

    def _ask(self) -> str:
        return question(f"parcel {self.parcel + 1}", list(PLACES))

    def _stop(self, action: str) -> str:
        if action not in PLACES:
            return f"[stop] You wait at the crossroads. {self._ask()}"
        k, right = self.parcel, action == self.places[self.parcel]
        self.parcel += 1
        if right:
            self.delivered += 1
            self.progression = self.delivered / len(self.places)
        said = (f"You deliver parcel {k + 1} at the {action}." if right
                else f"Nobody at the {action} expects parcel {k + 1}; it is lost.")
        if self.parcel == len(self.places):
            self.stage, self.over = "done", True
            return f"[done] {said} Your round is over."
        return f"[stop] {said} The road goes on to another crossroads. {self._ask()}"

    def _done(self, action: str) -> str:
        return "[done] Your round is over."


def make(task: str, max_steps: int | None) -> CourierGame:
    return CourierGame(task, max_steps)
