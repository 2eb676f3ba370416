"""What the built-in memory games share: knobs in the game's name, the one question at a decision
point, and the episode bookkeeping.

A memory game (``games/keydoor.py``, ``games/courier.py``) puts its difficulty in memory alone: a
few actions, corridors where any action walks on (no navigation to plan), the needed fact shown
once, distractor facts that make a note of everything a poor strategy, and at each decision point
one question, ``Which way on for <subject>? <a> or <b>.``, whose answer is final. Its knobs (the
distance between fact and decision, the distractors) are part of its name, ``keydoor:hall8-decoys3``,
so every batch, scaffold and result keys on them, and the batch identity records them
(``Environment.knobs``). ``llm/rule_actor.py`` reads the same question line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from automem_dagster.games.actions import ActionVocabulary, VocabularyGame
from automem_dagster.games.base import GameState, StepResult, world_digest

QUESTION = re.compile(r"Which way on for (?P<subject>[^?\n]+)\? (?P<options>[^.\n]+)\.")
"""A decision point's question: ``Which way on for the key? west or east.``"""

PACKAGES = ("automem-dagster",)
"""The built-in games are code of this project: its version names their rules in a batch identity."""


@dataclass(frozen=True)
class NeededFact:
    """One fact an episode shows once and asks for later: ``shown`` is the text that shows it (what the
    oracle holds), ``subject`` the question's (``the key``, ``parcel 2``), ``answer`` the right way among
    ``ways``. ``meta/fact_notes.py`` reads whether the memory wrote it down when it was shown."""

    shown: str
    subject: str
    answer: str
    ways: tuple[str, ...]


def question(subject: str, options: list[str]) -> str:
    """The one line that asks at a decision point (``QUESTION`` reads it back)."""
    listed = ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]
    return f"Which way on for {subject}? {listed}."


def parse_question(text: str) -> tuple[str, list[str]] | None:
    """The subject and options of the question in ``text`` (the last one), or None when it asks none."""
    found = list(QUESTION.finditer(text))
    if not found:
        return None
    options = re.split(r",\s*|\s+or\s+", found[-1]["options"].strip())
    return found[-1]["subject"].strip(), [o.strip().lower() for o in options if o.strip()]


def named_ways(text: str, ways: list[str] | tuple[str, ...]) -> list[str]:
    """The ``ways`` that ``text`` names as whole words, whatever their case (``key: WEST wing`` names west)."""
    return [w for w in ways if re.search(rf"\b{re.escape(w)}\b", text.lower())]


def parse_knobs(family: str, task: str, defaults: dict[str, int], minimum: dict[str, int]) -> dict[str, int]:
    """The knobs a task names (``hall8-decoys3``), the defaults for those it leaves out; a ValueError
    names the game, the bad part and the knobs there are."""
    knobs = dict(defaults)
    usage = "-".join(f"{k}{v}" for k, v in defaults.items())
    for part in filter(None, task.split("-")):
        match = re.fullmatch(r"([a-z]+)(\d+)", part)
        if match is None or match[1] not in defaults:
            raise ValueError(f"game '{family}:{task}': {part!r} is no knob of {family}; name knobs and numbers as in "
                             f"'{family}:{usage}' (knobs: {', '.join(defaults)})")
        knobs[match[1]] = int(match[2])
    for name, least in minimum.items():
        if knobs[name] < least:
            raise ValueError(f"game '{family}:{task}': {name} must be at least {least}, got {knobs[name]}")
    return knobs


def knob_task(knobs: dict[str, int]) -> str:
    """The canonical task of ``knobs``: every knob, in the family's order (``hall4-decoys2``)."""
    return "-".join(f"{k}{v}" for k, v in knobs.items())


def canonical_name(family: str, knobs: Callable[[str], dict[str, int]]) -> Callable[[str], str | None]:
    """The ``Environment.canonical`` of a knob family: ``keydoor`` and ``keydoor:hall8`` name
    ``keydoor:hall8-decoys2``, so a game has one name whatever was left to its defaults; a task whose
    knobs are wrong fails here, before anything is played."""
    def canonical(name: str) -> str | None:
        head, _, task = name.partition(":")
        if head.lower() != family:
            return None
        return f"{family}:{knob_task(knobs(task.strip()))}"
    return canonical


class RecallGame(VocabularyGame):
    """One episode of a memory game: subclasses set ``stage`` and ``progression`` in ``_advance`` and
    name the facts an oracle would hold (``oracle_notes``); this class counts steps and builds results."""

    default_action = "forward"
    packages = PACKAGES
    stages: tuple[str, ...] = ()

    def __init__(self, name: str, actions: dict[str, str], max_steps: int) -> None:
        self.name = name
        self.max_steps = max_steps
        self._vocabulary = ActionVocabulary(dict(actions), self.default_action, {})

    def reset(self, seed: int) -> StepResult:
        self.steps, self.progression, self.at, self.over = 0, 0.0, 0, False
        text = self._start(seed)
        self.first = self._result(text)
        return self.first

    def step(self, action: str) -> StepResult:
        self.steps += 1
        before = self.progression
        text = self._advance(action)
        return self._result(text, self.progression - before)

    def world_fingerprint(self) -> str:
        return world_digest(self.first, "\n".join(self.oracle_notes()).encode())

    def oracle_notes(self) -> list[str]:
        """The needed facts of this episode, as the game shows them: what the oracle baseline holds."""
        return [fact.shown for fact in self.needed_facts()]

    def needed_facts(self) -> list[NeededFact]:
        """This episode's needed facts (after ``reset``), in the order the game shows them."""
        raise NotImplementedError

    def _start(self, seed: int) -> str:
        raise NotImplementedError

    def _advance(self, action: str) -> str:
        raise NotImplementedError

    def inventory(self) -> dict[str, int]:
        """What the player carries, for the state a scaffold may sync."""
        return {}

    def _result(self, text: str, reward: float = 0.0) -> StepResult:
        """The step's result; the reward is the progression the step gained (BALROG-style, in [0, 1])."""
        done = self.over or self.steps >= self.max_steps
        state = GameState(position=(self.at, 0), inventory=self.inventory(), vitals={},
                          level={"stage": self.stages.index(self.stage)})
        return StepResult(text, reward, done, self.progression, state, {"step": self.steps})
