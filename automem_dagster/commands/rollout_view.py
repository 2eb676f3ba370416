"""How a rollout batch shows on the terminal beside its episode table: the retries its model
calls took, apart from the model's latency, and the report of a batch that could not finish."""

from __future__ import annotations

import shlex

from rich.table import Table

from automem_dagster.llm.attempts import cause_label
from automem_dagster.rollout import BatchSummary


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
