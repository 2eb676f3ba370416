"""The contract every game adapter fulfils.

The agent, the rollout runner and the metrics only ever see these types, so a new game is
one module that produces them. Observations are plain text because every model behind an
endpoint is a language model; the structured ``GameState`` is what a scaffold may sync into
memory files without asking the model to copy it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class GameState:
    """Facts about the player that a scaffold can sync into memory files verbatim.

    ``position`` is (x, y) in the game's own map coordinates, or None where the game has
    no position for the player this step. ``level`` holds numeric progress markers such as
    ``{"depth": 1, "xp_level": 1}`` for NetHack; ``vitals`` holds health-like values.
    """

    position: tuple[int, int] | None
    inventory: dict[str, int]
    vitals: dict[str, float]
    level: dict[str, int] = field(default_factory=dict)

    def render(self, source: str) -> str:
        """Text for a synced memory file: ``source`` is one of position/inventory/vitals/level/status."""
        if source == "position":
            return "unknown" if self.position is None else f"x={self.position[0]} y={self.position[1]}"
        if source == "inventory":
            return "\n".join(f"{k}: {v}" for k, v in sorted(self.inventory.items())) or "(empty)"
        if source == "vitals":
            return "\n".join(f"{k}: {v:g}" for k, v in self.vitals.items()) or "(none)"
        if source == "level":
            return "\n".join(f"{k}: {v}" for k, v in self.level.items()) or "(none)"
        if source == "status":
            return "\n".join(self.render(s) for s in ("position", "vitals", "level"))
        raise ValueError(f"unknown state source {source!r}: use position, inventory, vitals, level or status")


SYNC_SOURCES = ("position", "inventory", "vitals", "level", "status")


def state_record(state: GameState) -> dict:
    """The JSON form of a state, as trajectories store it."""
    return {"position": list(state.position) if state.position else None, "inventory": dict(state.inventory),
            "vitals": dict(state.vitals), "level": dict(state.level)}


@dataclass(frozen=True)
class ParsedAction:
    """A model's action text resolved against the vocabulary.

    ``valid`` is False when the text named no action; ``action`` is then the game's
    default action and ``note`` is the feedback line shown at the start of the next
    observation (BALROG's feedback-on-invalid-action behaviour).
    """

    action: str
    valid: bool
    note: str = ""


@dataclass(frozen=True)
class StepResult:
    """What one reset or step returns. ``progression`` is the episode's BALROG progression so far, in [0, 1]."""

    observation: str
    reward: float
    done: bool
    progression: float
    state: GameState
    info: dict = field(default_factory=dict)


def world_digest(first: StepResult, *world: bytes) -> str:
    """A digest of a world as ``reset`` made it: the first observation and state, and the bytes of
    whatever richer world data the simulator exposes (a map, the objects on it). Two worlds with
    one digest start the same; a package upgrade that changes the worlds of a seed changes it."""
    digest = hashlib.sha256(json.dumps([first.observation, state_record(first.state)], sort_keys=True).encode())
    for part in world:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


class Game(Protocol):
    """One episode at a time of one game; ``reset(seed)`` must make the episode exactly reproducible.

    ``packages`` names the distributions whose versions can change this game's worlds (a batch's
    identity records their versions); ``world_fingerprint`` is a digest of the world the last
    ``reset(seed)`` made (``world_digest``), called right after it."""

    name: str
    max_steps: int
    default_action: str
    packages: tuple[str, ...]

    def actions(self) -> dict[str, str]:
        """Valid action names mapped to one-line descriptions, in a stable order."""

    def parse_action(self, text: str) -> ParsedAction:
        """Resolve free model text (any case, spacing or synonym) to an action name."""

    def reset(self, seed: int) -> StepResult: ...

    def world_fingerprint(self) -> str:
        """A digest of the world as the last ``reset`` made it (``world_digest``)."""

    def step(self, action: str) -> StepResult:
        """Take a valid action name (as returned by ``parse_action``)."""

    def close(self) -> None: ...
