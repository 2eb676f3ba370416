"""How rollout batches show on the terminal: one progress bar per batch with an ETA while they
play (episode lines in the log above it), the retries a batch's model calls took apart from the
model's latency, and the report of a batch that could not finish."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from automem_dagster.llm.attempts import cause_label
from automem_dagster.rollout import BatchSummary

log = logging.getLogger("automem_dagster.rollout")


class BatchBars:
    """One bar per batch: steps played against steps left to play, episodes done of the batch's
    total, elapsed time and an ETA. Steps an episode resumes at, and episodes finished before this
    run, are not work of this run, so they leave the total instead of inflating the speed; an
    episode that ends before its step budget takes its unplayed steps off the total. A batch whose
    every episode was played before (an evaluation reused by a later round) has nothing to show
    as progress: its bar gives way to one log line saying so."""

    def __init__(self, bars: Progress):
        self.bars = bars

    def batch(self, name: str, episodes: int, max_steps: int):
        total = episodes * max_steps
        task = self.bars.add_task(name, total=total, episodes=f"0/{episodes} episodes")
        reached: dict[str, int] = {}
        done = 0

        def progress(episode: str, steps: int, finished: bool) -> None:
            nonlocal done, total
            fresh = episode not in reached
            if fresh:
                reached[episode] = steps
                total -= steps
            self.bars.update(task, total=total, advance=steps - reached[episode])
            reached[episode] = steps
            if finished:
                done += 1
                total -= max_steps - steps
                self.bars.update(task, total=total, episodes=f"{done}/{episodes} episodes")
                if not fresh:
                    log.info("%s: finished after %d steps", episode, steps)
            if done == episodes and total == 0:
                self.bars.remove_task(task)
                log.info("%s: reused, all %d episodes were played before", name, episodes)

        return progress


@contextmanager
def batch_bars(console: Console) -> Iterator[BatchBars]:
    """Bars for the batches played inside; the rollout log (finished and resumed episodes, resumes
    refused) is printed above them on the same console."""
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[episodes]}"),
               MofNCompleteColumn(), TextColumn("steps"), TimeElapsedColumn(), TextColumn("ETA"),
               TimeRemainingColumn())
    handler = RichHandler(console=console, show_path=False, show_level=False)
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        with Progress(*columns, console=console) as bars:
            yield BatchBars(bars)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def retries_table(summary: BatchSummary) -> Table | None:
    """Calls, attempts, retries by cause and the time lost to them beside model latency; None
    for a batch with no model call (the random baseline, or nothing finished)."""
    r = summary.retries
    if r is None or not r.calls:
        return None
    table = Table(title="model calls and retries (pooled over episodes)", show_header=False)
    table.add_row("calls", str(r.calls))
    table.add_row("attempts", str(r.attempts))
    table.add_row("retries", str(r.retries))
    for cause, n in sorted(r.by_cause.items()):
        table.add_row(f"  after {cause_label(cause)}", str(n))
    table.add_row("time lost to retries s", f"{r.retry_s:.2f}")
    table.add_row("model latency s", f"{r.model_s:.2f}")
    return table


def failure_report(error: Exception, argv: list[str]) -> str:
    """The failed batch's message (which server failed how often, what finished, where the rest
    resume) and the exact command that resumes it: the same one again."""
    return f"{error}\nResume with: {shlex.join(['automem', *argv])}"
