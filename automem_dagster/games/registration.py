"""The record an environment family registers (``Environment``), apart from how records are found.

Its own module so that the built-in families (``games/builtin.py``) and the plugin registry
(``games/plugin.py``, which lists the built-ins first) both import it, and neither imports the other
back: the registry reads the built-ins, the built-ins only need the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from automem_dagster.games.base import Game


@dataclass(frozen=True)
class Environment:
    """One environment family, as a plugin registers it.

    ``make(task, max_steps)`` builds a fresh ``Game`` (``task`` is "" for a family without tasks,
    ``max_steps`` None for the game's own budget). ``tasks`` lists named tasks, the first being the
    one Dagster partitions run; ``canonical(name)`` may rewrite a task's spelling (or claim a name
    without the ``family:`` prefix by returning ``family:task``) so results key on one name per task.
    ``replays_exactly`` says that a seed and the same actions always give the same steps; where it
    is False an interrupted episode is played again from step 0 instead of being resumed.
    ``knobs(task)`` gives the settings a task's name carries (a memory game's distance and distractors,
    ``games/recall.py``) for the batch identity to record; None for a family whose tasks have none.
    """

    family: str
    make: Callable[[str, int | None], Game]
    scaffold: Path
    eval_seeds: tuple[int, ...]
    goal: str
    tasks: tuple[str, ...] = ()
    replays_exactly: bool = True
    min_examples: int = 300
    canonical: Callable[[str], str | None] | None = None
    knobs: Callable[[str], dict[str, int]] | None = None

    def default_game(self) -> str:
        """The game Dagster partitions and demos run for this family: its first task, or the family."""
        return f"{self.family}:{self.tasks[0]}" if self.tasks else self.family
