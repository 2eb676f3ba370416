"""What the structure loop's assets show: a diagnosis, a revision, a scaffold version, a candidate's
evaluation and the keep-or-rollback decision on it; built here once for the assets and the CLI's reports."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from automem_dagster.defs.metadata.long_values import long_text
from automem_dagster.defs.metadata.rounds import challenger_decision_metadata, paired_metadata
from automem_dagster.defs.metadata.tables import code_block
from automem_dagster.games import game_family
from automem_dagster.loop.challenger import VerdictRecord
from automem_dagster.loop.storage import Storage
from automem_dagster.meta.diagnose import Diagnosis
from automem_dagster.meta.revise import Revision
from automem_dagster.rollout import BatchSummary
from automem_dagster.scaffold import content_hash, load_scaffold, scaffold_path, scaffold_yaml
from automem_dagster.scaffold.lineage import render_tree


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


def decision_metadata(record: VerdictRecord, storage: Storage, runs: dict, plots: dict[str, Path]) -> dict:
    """What ``champion_scaffold`` shows of a keep-or-rollback decision: the decision and its reason,
    the champion before and after, the lineage tree, the MLflow runs and the progression plot."""
    tree = render_tree(storage.load_lineage(game_family(record.game)))
    names = {"candidate": f"v{record.challenger}", "champion_before": record.champion_before,
             "champion_after": record.champion_after, **long_text("lineage", code_block(tree), markdown=True)}
    return challenger_decision_metadata(record, runs, plots, names, (
        "progression_by_version", f"{record.game}: progression by scaffold version"))


def candidate_evaluation_metadata(game: str, candidate: BatchSummary, champion: BatchSummary, plot_path: Path,
                                  candidate_version: int, champion_version: int) -> dict:
    """What ``candidate_evaluation`` shows of a candidate and the champion played on the fixed seeds."""
    names = (f"candidate v{candidate_version}", f"champion v{champion_version}")
    return {"outcome": "evaluated", "candidate": f"v{candidate_version}", "champion": f"v{champion_version}",
            **paired_metadata(game, "candidate", candidate, champion, names, plot_path)}
