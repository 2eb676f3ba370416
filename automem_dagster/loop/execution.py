"""How a whole round's Dagster run executes its steps (plain Python: the CLI reads it without loading
Dagster, and ``defs/cli_rounds.py`` and ``defs/celery_rounds.py`` act on it)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
EXECUTORS = ("in_process", "celery")


@dataclass(frozen=True)
class Execution:
    """How a CLI round's Dagster run executes its steps: ``in_process`` (the default: every step in this
    process) or ``celery`` (every step a task on ``broker`` for the ``automem worker`` processes), its batches
    split into ``shards`` seed shards; ``visibility_timeout`` in seconds, None: derived from the round's budget
    (``defs/execution/celery.py``)."""

    executor: str = "in_process"
    broker: str = DEFAULT_BROKER
    shards: int = 1
    visibility_timeout: int | None = None


IN_PROCESS = Execution()
"""A round's default: every step in the process that runs it."""
