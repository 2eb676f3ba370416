"""Shaping materialization metadata: tables, code blocks and what each stage's result shows, nothing computed.

Every asset builds its metadata here, so both loops' rounds show the same entries the same way."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from automem_dagster.defs.common.long_values import link, long_text
from automem_dagster.games import game_family
from automem_dagster.llm.attempts import describe_failures
from automem_dagster.loop.challenger import VerdictRecord
from automem_dagster.loop.gate import identity_quote
from automem_dagster.loop.storage import Storage
from automem_dagster.meta.diagnose import Diagnosis
from automem_dagster.meta.revise import Revision
from automem_dagster.plots import png_markdown
from automem_dagster.rollout import BatchSummary
from automem_dagster.scaffold import content_hash, load_scaffold, scaffold_path, scaffold_yaml
from automem_dagster.scaffold.lineage import render_tree


def code_block(text: str, language: str = "") -> str:
    return f"```{language}\n{text.rstrip()}\n```"


def _cell(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def behaviour_table(columns: dict[str, dict[str, float]]) -> str:
    """One row per behaviour metric, one column per batch (``{"candidate v1": metrics, ...}``)."""
    names = list(columns)
    keys = list(next(iter(columns.values())))
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {k} | " + " | ".join(_cell(columns[n].get(k, "")) for n in names) + " |" for k in keys]
    return "\n".join(lines)


def progression_table(batches: dict[str, BatchSummary]) -> str:
    """Mean ± SE (percent, BALROG's convention: ``4.5 ± 0.0``) and the per-seed progressions of each batch."""
    lines = ["| scaffold | progression % | n | per seed % |", "|---|---:|---:|---|"]
    for name, b in batches.items():
        seeds = ", ".join(f"{e.seed}: {100 * e.progression:.1f}" for e in sorted(b.episodes, key=lambda e: e.seed))
        lines.append(f"| {name} | {b.progression.mean:.1f} ± {b.progression.stderr:.1f} | {b.progression.n} | {seeds} |")
    return "\n".join(lines)


def retries_table(batches: dict[str, BatchSummary]) -> str:
    """Per batch: calls, attempts, retries by cause, time lost to them and model latency, so a faulty
    endpoint shows as retries rather than as a slow model."""
    lines = ["| batch | calls | attempts | retries by cause | time lost to retries s | model latency s |",
             "|---|---:|---:|---|---:|---:|"]
    for name, b in batches.items():
        r = b.retries
        if r is not None:
            causes = describe_failures(r.by_cause) or "none"
            lines.append(f"| {name} | {r.calls} | {r.attempts} | {causes} | {r.retry_s:.2f} | {r.model_s:.2f} |")
    return "\n".join(lines)


def identity_text(summary: BatchSummary) -> str:
    """A batch's identity as one line: its digest and the models that played (``gate.identity_quote``)."""
    quote = identity_quote(summary)
    models = ", ".join(f"{role}={model}" for role, model in quote["models"].items())
    return f"{quote['digest']} ({models})" if quote["digest"] else "unknown (played before batches recorded identities)"


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


# --- the structure loop's metadata, built here once for the assets and the CLI's reports ---------

def diagnosis_metadata(result: Diagnosis, out: Path) -> dict:
    """What ``diagnosis`` shows of a diagnosis written to ``out``, with its meta mode and what it cost."""
    cost = result.tracking_summary()["metrics"]
    return {
        "outcome": "diagnosed",
        **long_text("summary", result.summary),
        "findings": len(result.findings),
        "dropped": len(result.dropped),
        "attempts": len(result.attempts),
        "meta_mode": result.meta_mode,
        "tool_calls": cost["diagnosis_tool_calls"],
        "tokens": cost["diagnosis_tokens"],
        **long_text("diagnosis", result.to_markdown(), markdown=True),
        "diagnosis_dir": dg.MetadataValue.path(str(out)),
    }


def revision_metadata(revision: Revision, out: Path, partition: str | None) -> dict:
    """What ``scaffold_candidate`` shows of a revision: the candidate, its diff and the meta-LLM's
    attempts when accepted (``partition``: its ``scaffold_version`` key), the reason when rejected."""
    attempts = dg.MetadataValue.md("\n".join(f"{i}. {a.error or 'valid'}" for i, a in enumerate(revision.attempts, 1)))
    if not revision.accepted:
        return {"outcome": "rejected", **long_text("reason", revision.rejected_reason or ""), "attempts": attempts,
                "meta_mode": revision.meta_mode, "tool_calls": len(revision.tool_calls),
                "revision_dir": dg.MetadataValue.path(str(out))}
    return {
        "outcome": "accepted",
        "candidate": f"v{revision.version}",
        "parent": f"v{revision.parent_version}",
        "scaffold_version": partition,
        "changes": dg.MetadataValue.md("\n".join(f"- {c}" for c in revision.changes)),
        "attempts": attempts,
        "meta_mode": revision.meta_mode,
        "tool_calls": len(revision.tool_calls),
        **long_text("diff", revision.diff_md, markdown=True),
        "revision_dir": dg.MetadataValue.path(str(out)),
    }


def scaffold_version_metadata(storage: Storage, family: str, version: int) -> dict:
    """What ``scaffold_version`` shows of one version: YAML, content hash, parent and the lineage's decision."""
    scaffold = load_scaffold(family, version, storage.scaffolds)
    lineage = storage.load_lineage(family)
    record = next((r for r in lineage.versions if r.version == version), None)
    return {
        "content_hash": content_hash(scaffold),
        "parent": "none" if scaffold.parent is None else f"v{scaffold.parent}",
        "decision": "not in the lineage" if record is None else record.decision or "pending",
        **long_text("reason", record.reason if record is not None and record.reason else ""),
        "champion": lineage.champion().version == version,
        "description": scaffold.description or "",
        "path": dg.MetadataValue.path(str(scaffold_path(family, version, storage.scaffolds))),
        **long_text("scaffold", code_block(scaffold_yaml(scaffold), "yaml"), markdown=True),
    }


def no_candidate_metadata(reason: str) -> dict:
    """What ``candidate_evaluation`` shows when the round made no candidate (revision rejected)."""
    return {"outcome": "no candidate", **long_text("reason", reason)}


def no_decision_metadata(reason: str, storage: Storage, family: str) -> dict:
    """What ``champion_scaffold`` shows when there was nothing to decide: the champion stays."""
    lineage = storage.load_lineage(family)
    before = lineage.champion().version
    return {"decision": "no candidate", **long_text("reason", reason), "champion_before": before, "champion_after": before,
            **long_text("lineage", code_block(render_tree(lineage)), markdown=True)}


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


def decision_metadata(record: VerdictRecord, storage: Storage, runs: dict, plots: dict[str, Path]) -> dict:
    """What ``champion_scaffold`` shows of a keep-or-rollback decision: the decision and its reason,
    the champion before and after, the lineage tree, the MLflow runs and the progression plot."""
    tree = render_tree(storage.load_lineage(game_family(record.game)))
    names = {"candidate": f"v{record.challenger}", "champion_before": record.champion_before,
             "champion_after": record.champion_after, **long_text("lineage", code_block(tree), markdown=True)}
    return challenger_decision_metadata(record, runs, plots, names, (
        "progression_by_version", f"{record.game}: progression by scaffold version"))
