"""What both loops' rounds show alike: a played batch, a challenger paired with the champion, and a decision.

The structure loop's candidate and the proficiency loop's specialist are both challengers judged against the
champion in service on the same fixed seeds (``loop/challenger.py``), so their evaluation and promotion
assets take their entries from here and a person reads both pages the same way."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from automem_dagster.defs.metadata.long_values import link, long_text
from automem_dagster.defs.metadata.tables import behaviour_table, identity_text, progression_table, retries_table
from automem_dagster.loop.challenger import VerdictRecord
from automem_dagster.loop.gate import per_seed
from automem_dagster.metrics.paired import compare_paired
from automem_dagster.plots import plot_behaviour, png_markdown
from automem_dagster.rollout import BatchSummary


def rollout_metadata(summary: BatchSummary, scaffold_version: int, seeds: list[int]) -> dict:
    """What the training-rollout assets of both loops show of the batch they played."""
    p = summary.progression
    return {
        "outcome": "played",
        "scaffold": f"v{scaffold_version}",
        "progression": f"{p.mean:.1f} ± {p.stderr:.1f} % (n={p.n})",
        "progression_mean": p.mean,
        "progression_se": p.stderr,
        "episodes": len(summary.episodes),
        "seeds": dg.MetadataValue.json(seeds),
        **long_text("behaviour", behaviour_table({f"v{scaffold_version}": summary.behaviour.as_dict()}), markdown=True),
        **long_text("retries", retries_table({f"v{scaffold_version}": summary}), markdown=True),
        "batch": dg.MetadataValue.path(summary.out_dir),
        "batch_identity": identity_text(summary),
    }


def paired_metadata(game: str, role: str, challenger: BatchSummary, champion: BatchSummary,
                    names: tuple[str, str], plot_path: Path) -> dict:
    """Metadata of ``challenger`` (``role``: candidate or specialist) against ``champion`` on paired
    seeds: both means ± SE, the paired difference with its bootstrap CI, the progression and
    behaviour tables, the behaviour plot and both batch folders."""
    c = compare_paired(per_seed(challenger), per_seed(champion))
    plot = plot_behaviour(challenger.behaviour.as_dict(), champion.behaviour.as_dict(),
                          f"{game}: {names[0]} vs {names[1]}", plot_path, *names)
    return {
        f"{role}_mean": challenger.progression.mean,
        f"{role}_se": challenger.progression.stderr,
        "champion_mean": champion.progression.mean,
        "champion_se": champion.progression.stderr,
        **long_text("progression", progression_table(dict(zip(names, (challenger, champion), strict=True))), True),
        "paired_difference": (f"{c.mean_difference:+.2f} points (SE {c.stderr_difference:.2f}, bootstrap 95% CI "
                              f"[{c.ci_low:+.2f}, {c.ci_high:+.2f}], {c.n} paired seeds)"),
        **long_text("behaviour", behaviour_table({names[0]: challenger.behaviour.as_dict(),
                                                  names[1]: champion.behaviour.as_dict()}), markdown=True),
        "behaviour_plot": dg.MetadataValue.md(png_markdown(plot, f"{names[0]} vs {names[1]}: behaviour")),
        **long_text("retries", retries_table(dict(zip(names, (challenger, champion), strict=True))), markdown=True),
        f"{role}_batch": dg.MetadataValue.path(challenger.out_dir),
        "champion_batch": dg.MetadataValue.path(champion.out_dir),
        f"{role}_identity": identity_text(challenger),
        "champion_identity": identity_text(champion),
    }


def run_link_metadata(runs: dict) -> dict:
    """``mlflow_<role>_run``: a link to each logged MLflow run, labelled with its role and short id."""
    return {f"mlflow_{role}_run": link(f"MLflow {role} run {run.run_id[:8]}", run.url) for role, run in runs.items()}


def could_have_seen(detectable: dict) -> dict:
    """The smallest gain a decision's gate could have detected (``metrics.power``), for its page;
    nothing for records from before the figure was kept."""
    return long_text("could_have_seen", detectable["summary"]) if detectable else {}


def challenger_decision_metadata(record: VerdictRecord, runs: dict, plots: dict[str, Path], names: dict,
                                 plot: tuple[str, str]) -> dict:
    """What a promotion of either loop shows of its decision: the outcome and its reason, ``names`` (the
    challenger and the champion before and after, as the loop names them), the paired difference, what
    the gate could have seen, the noise floor it was taken under and how the champion was played
    (``loop.noise``), the MLflow runs, and the progression plot as ``plot`` (entry, title)."""
    metadata = {
        "decision": record.outcome,
        **long_text("reason", record.reason),
        **names,
        "mean_difference": record.comparison["mean_difference"],
        "stderr_difference": record.comparison["stderr_difference"],
        **could_have_seen(record.detectable),
        **long_text("noise_floor", record.noise.get("summary", "not recorded (a decision from before floors)")),
        "champion_play": record.noise.get("champion_play", "not recorded"),
        **run_link_metadata(runs),
    }
    if "progression" in plots:
        metadata[plot[0]] = dg.MetadataValue.md(png_markdown(plots["progression"], plot[1]))
    return metadata
