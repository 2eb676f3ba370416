"""The rule actor: a game role that acts by rule on what memory shows, so that the memory model is
what a memory game measures.

The embedded 135M model barely acts on a note even when the note is there (issue 53: asked at the
junction with the key's wing in its memory it chose right 3 times in 30), so with it as the actor
no memory decision can change an outcome. In the game role of the two-model agent this actor takes
its place: the memory model still writes and consults (what the structure loop revises and the
proficiency loop trains), and the action follows from the consultation by a fixed rule:

- at a decision point (the observation asks ``Which way on for <subject>? <a> or <b>.``,
  ``games/recall.py``), the way named on the latest line of the memory shown that names exactly one
  of the ways, preferring lines about the subject (``key: west wing`` for "the key"); with no such
  line, it does not guess: it answers the game's first listed action, which at a memory game's
  decision point waits (key and door: a wall blocks the way; courier: you wait at the crossroads);
- anywhere else, the game's first listed action (``forward`` in the memory games: it walks on).

Rule 1 took the first way offered when memory named none. A guess wins half of key and door's
junctions, so a missing note cost only half the time: the replay credited a decisive note only when
the key lay in the other wing, and the window baseline scored 50 % with no memory at all. Rule 2
makes a missing note lose every time, so what the memory model wrote and read is all that decides.

An endpoints file names it ``actor: rules`` (``llm/config.py``); every record of a batch it played
says ``{"actor": "rules", "rule_version": 2}``, so no table mistakes its figures for a model's, nor
a batch of one rule for another's. It answers in the token syntax a model would, so the agent records
its turn like any other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from automem_dagster.games.recall import named_ways, parse_question
from automem_dagster.llm.client import Completion

RULE_VERSION = 2
"""Bump when the rule changes: batches played under another rule are other batches (2: no guess at a
decision point without a note)."""

CONSULTED = "Memory consulted:\n"
"""How the agent puts a consultation before the step message (``agent/savings.show_consulted``)."""
STEP_START = re.compile(r"\n\nStep \d+[.:]")
"""Where the step message begins after the consultation (``prompts.step_message``, ``baseline_step_message``)."""
ACTIONS_HEADER = "Actions:\n"


@dataclass(frozen=True)
class RuleActorSettings:
    """What the agent reads of an endpoint's settings, for an actor that has no server: no constraint
    (it always answers one action token), no sampling (it is deterministic), no context limit."""

    name: str = "actor"
    model: str = "rules"
    base_url: str = "rules"
    server: str = "rules"
    constrained: str = "none"
    temperature: float = 0.0
    seed: int | None = None
    max_tokens: int = 16
    context_tokens: int = 1_000_000
    lora_id: int | None = None
    replicas: tuple[str, ...] = ()


class RuleActor:
    """The game role's stand-in client: ``complete`` reads the request and answers ``<|ACTION|>a<|END|>``."""

    config = RuleActorSettings()
    base_url = "rules"
    first_reply = None

    @staticmethod
    def identity() -> dict:
        """What a batch identity, its manifest and its tracking record say of the game role."""
        return {"actor": "rules", "rule_version": RULE_VERSION}

    async def complete(self, messages: list[dict], grammar: str | None = None, **_: object) -> Completion:
        return Completion(f"<|ACTION|>{act(messages)}<|END|>", 0, 0, 0.0, 1, "stop")

    async def close(self) -> None:
        return None


def act(messages: list[dict]) -> str:
    """The rule's action for a request: the system message lists the actions, the last user message
    holds the consultation (if any) and the observation."""
    memory, observation = split_consulted(messages[-1]["content"])
    asked = parse_question(observation)
    noted = way_in_memory(*asked, memory.splitlines()) if asked else None
    return noted or first_action(messages[0]["content"])


def split_consulted(content: str) -> tuple[str, str]:
    """(the memory shown, the rest of the message); no memory when nothing was consulted."""
    if not content.startswith(CONSULTED):
        return "", content
    found = STEP_START.search(content)
    cut = found.start() if found else len(CONSULTED)
    return content[len(CONSULTED):cut], content[cut:]


def way_in_memory(subject: str, ways: list[str], lines: list[str]) -> str | None:
    """The way named on the latest line naming exactly one of ``ways``, lines about ``subject`` first."""
    key = re.sub(r"^(the|a|an)\s+", "", subject.lower())
    about = [line for line in lines if key in line.lower()]
    for pool in (about, lines):
        for line in reversed(pool):
            named = named_ways(line, ways)
            if len(named) == 1:
                return named[0]
    return None


def first_action(system: str) -> str:
    """The first action the system prompt lists (``prompts.system_prompt``: ``Actions:`` then one per line)."""
    listed = system.rsplit(ACTIONS_HEADER, 1)[-1].splitlines()
    return listed[0].split(":", 1)[0].split(",", 1)[0].strip() if listed else ""
