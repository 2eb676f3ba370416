"""Episode progress from the rollout runner, as Dagster log lines."""

from __future__ import annotations

from automem_dagster.rollout.runner import Progress


def episode_log(log) -> Progress:
    """A ``Progress`` callback that logs each finished episode (``log`` is ``context.log``)."""

    def progress(episode: str, steps: int, finished: bool) -> None:
        if finished:
            log.info(f"{episode}: finished after {steps} steps")

    return progress
