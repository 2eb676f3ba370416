"""How the commands show what they did: progress bars, result tables, where to look next."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from automem_dagster.commands import rollout_view
from automem_dagster.loop.proficiency import ProficiencyResult
from automem_dagster.loop.report import RoundReport
from automem_dagster.loop.storage import Storage
from automem_dagster.loop.structure import RoundResult
from automem_dagster.rollout import BatchSummary

console = Console(stderr=True)
"""Progress, stage lines and errors go to stderr; tables and results to stdout."""


def episode_progress():
    """Episode progress as one bar per batch with an ETA, episode lines in the log above the bars."""
    return rollout_view.batch_bars(console)


def print_summary(summary: BatchSummary) -> None:
    table = Table(title=f"{summary.game}: {summary.progression or 'no finished episodes'}")
    for col in ("seed", "steps", "progression %", "reward", "valid actions %", "model calls"):
        table.add_column(col, justify="right")
    for e in summary.episodes:
        table.add_row(str(e.seed), str(e.steps), f"{100 * e.progression:.1f}", f"{e.total_reward:g}",
                      f"{100 * e.valid_action_rate:.0f}", str(e.model_calls))
    Console().print(table)
    b = summary.behaviour
    if b is not None:
        metrics = Table(title="behaviour (pooled over episodes)", show_header=False)
        for key, value in b.as_dict().items():
            metrics.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
        Console().print(metrics)
    retries = rollout_view.retries_table(summary)
    if retries is not None:
        Console().print(retries)
    Console().print(f"output: {summary.out_dir}")


def print_round(result: RoundResult, report: RoundReport) -> None:
    table = Table(title=f"{result.game}: round from champion v{result.parent}", show_header=False)
    table.add_row("outcome", result.outcome)
    if result.revision is not None:
        table.add_row("revision", ", ".join(result.revision.changes) or str(result.revision.rejected_reason))
        table.add_row("meta-LLM attempts", str(len(result.revision.attempts)))
    for note in result.notes:
        table.add_row("note", note)
    if result.diagnosis_dir:
        table.add_row("diagnosis", str(result.diagnosis_dir / "diagnosis.md"))
    if result.revision_dir:
        table.add_row("diff", str(result.revision_dir / "diff.md"))
    if result.decision is not None:
        table.add_row("decision", result.decision.reason)
        table.add_row("champion", f"v{result.decision.champion_before} -> v{result.decision.champion_after}")
    print_with_report(table, report)


def print_proficiency(result: ProficiencyResult, report: RoundReport) -> None:
    table = Table(title=f"{result.game}: LoRA memory specialist {result.adapter.id} for scaffold v{result.scaffold_version}",
                  show_header=False)
    if result.dataset is not None:
        table.add_row("dataset", f"{result.dataset.examples} examples, version {result.dataset.stats['dataset_hash']} "
                                 f"({result.dataset.out_dir})")
    if result.choice is not None:
        table.add_row("LoRA settings", result.choice.describe().removeprefix("LoRA configuration: "))
    losses = result.training["validation_loss"]
    table.add_row("validation loss", f"{losses[0][1]:.3f} -> {losses[-1][1]:.3f} over {losses[-1][0]} steps")
    table.add_row("adapter", result.adapter.gguf or result.adapter.adapter_dir)
    if result.decision is not None:
        table.add_row("decision", result.decision.reason)
        table.add_row("specialist in service", f"{result.decision.champion_before} -> {result.decision.champion_after}")
    print_with_report(table, report)


def print_with_report(table: Table, report: RoundReport) -> None:
    """Print a round's table with the plots and MLflow runs its report produced, one row each."""
    for name, path in report.plots.items():
        table.add_row(f"plot: {name}", str(path))
    for name, run in report.runs.items():
        table.add_row(f"MLflow: {name}", run.url)
    Console().print(table)


def print_where_to_look(storage: Storage) -> None:
    """The two UIs by their make targets (each opens the project's own store: Dagster's instance
    in ``.dagster_home``, MLflow's in ``$MLFLOW_TRACKING_URI`` or ``mlflow/mlflow.db``), the
    lineage command and the reports folder. A project home other than the checkout (the demo's) is
    named in the lineage command, as ``$AUTOMEM_HOME``."""
    home = "" if storage == Storage() else f"AUTOMEM_HOME={storage.runs.parent} "
    console.print(
        "\nWhere to look:\n"
        f"  lineage:   {home}.venv/bin/automem lineage --game <game>   (files: {storage.lineage})\n"
        "  Dagster:   make dagster     then open http://127.0.0.1:3000 (the rounds' assets, checks and plots)\n"
        "  MLflow:    make mlflow-ui   then open http://127.0.0.1:5000 (evaluation and training runs, the "
        "registered specialist)\n"
        f"  reports:   {storage.runs / 'reports'}"
    )
