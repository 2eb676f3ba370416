"""Derived signals: warnings the harness computes from recent history.

The scaffold switches them on (AutoMem's winning scaffolds added both); the same
definitions feed the unproductive-action metric, so a warning and the metric it is meant to
reduce can never disagree.
"""

from __future__ import annotations

import re

_OPPOSITE = {
    "north": "south", "south": "north", "east": "west", "west": "east",
    "northeast": "southwest", "southwest": "northeast",
    "northwest": "southeast", "southeast": "northwest",
}


def direction_of(action: str) -> str | None:
    """The compass direction an action moves in (``move_west`` -> west, ``far_northeast``), else None."""
    for word in re.split(r"[\s_-]+", action.lower()):
        if word in _OPPOSITE:
            return word
    return None


def is_reversal(previous: str | None, current: str | None) -> bool:
    """True when ``current`` moves straight back the way ``previous`` came."""
    a, b = direction_of(previous or ""), direction_of(current or "")
    return a is not None and b is not None and _OPPOSITE[a] == b


def count_reversals(actions: list[str]) -> int:
    return sum(is_reversal(a, b) for a, b in zip(actions, actions[1:], strict=False))


def progress_fingerprint(state: dict) -> tuple:
    """What must change for a step to count as progress: position, inventory and level.

    The observation text itself is no good for this: NetHack's status line carries the
    turn counter, so the text changes even when the agent walks into a wall forever.
    ``state`` is a trajectory's state record (``position``, ``inventory``, ``level``).
    """
    position = state.get("position")
    return (
        tuple(position) if position is not None else None,
        tuple(sorted(state.get("inventory", {}).items())),
        tuple(sorted(state.get("level", {}).items())),
    )


def stuck_for(fingerprints: list[tuple]) -> int:
    """How many of the latest fingerprints equal the newest one (1 = just itself)."""
    if not fingerprints:
        return 0
    newest, run = fingerprints[-1], 0
    for obs in reversed(fingerprints):
        if obs != newest:
            break
        run += 1
    return run
