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


def stuck_for(observations: list[str]) -> int:
    """How many of the latest observations are identical to the newest one (1 = just itself)."""
    if not observations:
        return 0
    newest, run = observations[-1], 0
    for obs in reversed(observations):
        if obs != newest:
            break
        run += 1
    return run
