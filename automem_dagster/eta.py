"""How long the rest of a phase will take, for the counters of phases without a progress bar."""

from __future__ import annotations

import math


def format_duration(seconds: float) -> str:
    """``m:ss`` or ``h:mm:ss``; ``?`` when it cannot be estimated yet."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def eta(done: int, total: int, elapsed_s: float) -> str:
    """The time left for ``total - done`` more units at the mean pace of the ``done`` so far."""
    return format_duration(elapsed_s / done * (total - done) if done else math.nan)
