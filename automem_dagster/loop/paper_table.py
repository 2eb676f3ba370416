"""The AutoMem paper's behaviour table for a game family, measured here: the first scaffold (the
lineage's root, v0) against the final champion on the fixed evaluation seeds.

The paper's Figure 4 reports, from v0 to the final scaffold, unproductive actions -32 to -65 %,
redundant writes -68 to -83 %, empty searches -13 to -83 % and input tokens per step -3 to -30 %.
These are structural effects (a keyed file cannot pile up duplicates; a line cap bounds the prompt),
so they can move on a small model where progression cannot. Each row here is a paired change on the
same seeds (``metrics.paired.paired_change``): both means, the mean per-seed difference with its
bootstrap interval, a two-sided paired permutation p-value, and the relative change beside the
paper's range. Both agents are played with ``evaluate_stage``, so batches already played (a round's
champion evaluation, say) are reused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from automem_dagster.atomic import write_json_atomic, write_text_atomic
from automem_dagster.games import game_family
from automem_dagster.llm.session import Clients
from automem_dagster.loop.evaluation import evaluate_stage
from automem_dagster.loop.gate import episodes_of, per_seed
from automem_dagster.loop.report import report_dir
from automem_dagster.loop.storage import Storage
from automem_dagster.metrics.behaviour import behaviour_metrics
from automem_dagster.metrics.paired import GATE_METRICS
from automem_dagster.metrics.resampling import paired_change
from automem_dagster.options import BUDGET
from automem_dagster.plots import plot_paper_table
from automem_dagster.rollout import BatchSummary
from automem_dagster.rollout.runner import Progress
from automem_dagster.scaffold import load_scaffold

PAPER_RANGES = {
    "unproductive_action_rate": (-32.0, -65.0),
    "redundant_write_rate": (-68.0, -83.0),
    "empty_search_rate": (-13.0, -83.0),
    "input_tokens_per_step": (-3.0, -30.0),
}
"""The relative change from v0 to the final scaffold that the paper's Figure 4 reports, in percent."""

TABLE_METRICS = ("progression", *GATE_METRICS)
"""Progression in points (higher is better); the behaviour and cost metrics, lower is better."""


@dataclass(frozen=True)
class TableRow:
    metric: str
    first: float
    final: float
    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    relative_change: float | None
    paper: str

    def cells(self) -> list[str]:
        if self.relative_change is not None:
            relative = f"{self.relative_change:+.0f}%"
        else:
            relative = "n/a (from 0)" if self.final else "0 on both"
        return [self.metric, f"{self.first:.4g}", f"{self.final:.4g}", f"{self.difference:+.4g}",
                f"[{self.ci_low:+.4g}, {self.ci_high:+.4g}]", f"{self.p_value:.3f}", relative, self.paper]


@dataclass
class PaperTable:
    """The table of ``game``: ``first_version`` against ``final_version`` on ``seeds``, ``max_steps`` each."""

    game: str
    first_version: int
    final_version: int
    seeds: list[int]
    max_steps: int
    rows: list[TableRow]
    first_batch: str
    final_batch: str
    files: dict[str, str] = field(default_factory=dict)

    def markdown(self) -> str:
        head = ["metric", f"v{self.first_version}", f"v{self.final_version}", "difference", "95% CI", "p",
                "relative change", "paper"]
        lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * 6 + "---|"]
        lines += ["| " + " | ".join(row.cells()) + " |" for row in self.rows]
        return "\n".join(lines)


def table_metric(batch: BatchSummary, metric: str) -> dict[int, float]:
    """``metric`` per seed as the paper's Figure 4 reads it (``BehaviourMetrics``: all input tokens, a rate
    without a denominator 0), unlike the equal_score gate's reading (``behaviour.gate_reading``)."""
    return {seed: behaviour_metrics([steps]).as_dict()[metric] for seed, steps in episodes_of(batch).items()}


def table_rows(first: BatchSummary, final: BatchSummary) -> list[TableRow]:
    """One paired change per ``TABLE_METRICS`` entry, final minus first, per seed."""
    rows = []
    for metric in TABLE_METRICS:
        if metric == "progression":
            before, after = ({s: 100.0 * v for s, v in per_seed(b).items()} for b in (first, final))
            paper = "2x-4x (structure alone)"
        else:
            before, after = (table_metric(b, metric) for b in (first, final))
            low, high = PAPER_RANGES[metric]
            paper = f"{low:+.0f}% to {high:+.0f}%"
        c = paired_change(after, before)
        rows.append(TableRow(metric, c.before, c.after, c.difference, c.ci_low, c.ci_high, c.p_value,
                             c.relative_change, paper))
    return rows


async def paper_table(game: str, max_steps: int, seeds: list[int], clients: Clients, storage: Storage,
                      concurrency: int = BUDGET.concurrency, progress: Progress | None = None, first_version: int | None = None,
                      final_version: int | None = None) -> PaperTable:
    """Play (or reuse) the lineage's root and its champion on ``seeds`` and write the table, its JSON
    and its figure under ``runs/reports/<game>/``; ``first_version`` replaces the root, ``final_version``
    the champion (a rolled-back candidate, say: what its round measured, in the paper's terms). Refuses
    to compare a version with itself."""
    family = game_family(game)
    lineage = storage.load_lineage(family)
    first = lineage.versions[0].version if first_version is None else lineage.record(first_version).version
    final = lineage.champion().version if final_version is None else lineage.record(final_version).version
    if final == first:
        if final_version is None:
            raise ValueError(f"the {family} champion is still v{first}: the table compares it with a later champion, "
                             f"so run rounds first (automem rounds --game {game}), or name a rolled-back candidate "
                             "with --final N")
        raise ValueError(f"--first and --final both name v{final}: a table compares two different versions")
    batches = [await evaluate_stage(game, load_scaffold(family, v, storage.scaffolds), seeds, max_steps, clients,
                                    storage, concurrency, progress) for v in (first, final)]
    table = PaperTable(game, first, final, seeds, max_steps, table_rows(*batches), batches[0].out_dir, batches[1].out_dir)
    return write_paper_table(table, report_dir(storage, game))


def write_paper_table(table: PaperTable, out: Path) -> PaperTable:
    """The table as markdown and JSON, and its figure, in ``out`` (named by both versions and the budget)."""
    stem = f"paper-table-v{table.first_version}-v{table.final_version}-steps{table.max_steps}-n{len(table.seeds)}"
    plot = plot_paper_table([asdict(r) for r in table.rows], f"{table.game}: v{table.first_version} -> "
                            f"v{table.final_version} on {len(table.seeds)} seeds x {table.max_steps} steps",
                            out / f"{stem}.png", f"v{table.first_version}", f"v{table.final_version}")
    table.files = {"markdown": str(out / f"{stem}.md"), "json": str(out / f"{stem}.json"), "figure": str(plot)}
    write_text_atomic(Path(table.files["markdown"]), table.markdown() + "\n")
    write_json_atomic(Path(table.files["json"]), asdict(table))
    return table

