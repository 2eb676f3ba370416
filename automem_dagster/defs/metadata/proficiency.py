"""What the proficiency loop's assets show, built here once: curation counts, the LoRA choice, the
training's figures, the specialist's paired evaluation and the decision."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from automem_dagster.defs.metadata.long_values import long_text
from automem_dagster.defs.metadata.rounds import challenger_decision_metadata, paired_metadata, run_link_metadata
from automem_dagster.defs.metadata.tables import code_block
from automem_dagster.loop.challenger import VerdictRecord
from automem_dagster.meta.dataset_card import calibration_words, replay_words
from automem_dagster.meta.fate import fate_counts
from automem_dagster.meta.lora_config import LoraChoice
from automem_dagster.plots import png_markdown
from automem_dagster.rollout import BatchSummary
from automem_dagster.tracking import TrackedRun
from automem_dagster.training.registry import AdapterRecord
from automem_dagster.training.sft_result import FIGURES


def _no_specialist(name: str | None) -> str:
    return name or "none (one-model agent)"


def _counts_table(title: str, counts: dict[str, int]) -> str:
    lines = [f"| {title} | count |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    return "\n".join(lines)


def curation_metadata(stats: dict, out: Path) -> dict:
    """What a person checks in a curation (also when it stopped short): counts, fates, exclusions, the
    replay (its floor, what was left unmeasured, its cost) and the cheap score's calibration."""
    excluded = stats.get("excluded_episodes", [])
    return {
        "examples": stats["examples"],
        "decisions": stats["decisions"],
        "kept_decisions": stats["kept_decisions"],
        "episodes": stats["episodes"],
        "fates": dg.MetadataValue.md(_counts_table("fate", fate_counts(stats))),
        "examples_by_phase": dg.MetadataValue.md(_counts_table("phase", stats["examples_by_phase"])),
        "excluded_episodes": dg.MetadataValue.md(
            "\n".join(f"- {e['trajectory']}: {e['reason']}" for e in excluded) or "none"),
        "score": dg.MetadataValue.json(stats.get("score", {})),
        "calibration": dg.MetadataValue.md(calibration_words(stats.get("calibration") or {})),
        "replay": dg.MetadataValue.md(replay_words(stats) or "not recorded"),
        "dataset_dir": dg.MetadataValue.path(str(out)),
    }


def dataset_metadata(stats: dict, out: Path, scaffold_version: int) -> dict:
    """What ``sft_dataset`` shows of a finished curation; its content hash is the dataset's version."""
    return {"outcome": "curated", "dataset_version": stats["dataset_hash"], "scaffold": f"v{scaffold_version}",
            **curation_metadata(stats, out)}


def lora_config_metadata(choice: LoraChoice, path: Path) -> dict:
    """What ``lora_config`` shows: the settings, where they came from, and the meta-LLM's attempts."""
    attempts = "\n".join(f"{i}. {a.error or 'valid'}" for i, a in enumerate(choice.attempts, 1)) or "(none: not asked)"
    return {
        "source": choice.source,
        "reasoning": choice.reasoning,
        **long_text("settings", code_block(json.dumps(choice.settings.model_dump(), indent=2), "json"), markdown=True),
        **long_text("defaults", code_block(json.dumps(choice.defaults.model_dump(), indent=2), "json"), markdown=True),
        "attempts": dg.MetadataValue.md(attempts),
        "config_file": dg.MetadataValue.path(str(path)),
    }


def adapter_metadata(game: str, record: AdapterRecord, training: dict, plot: Path, outcome: str,
                     run: TrackedRun | None = None) -> dict:
    """What ``lora_adapter`` shows of a trained (or resumed) adapter: losses, speed, files, MLflow run."""
    losses = training["validation_loss"]
    metadata = {
        "outcome": outcome,
        "adapter": record.id,
        "scaffold": f"v{record.scaffold_version}",
        "dataset_version": record.dataset,
        "settings_source": record.settings_source,
        "validation_loss": f"{losses[0][1]:.3f} -> {losses[-1][1]:.3f} over {losses[-1][0]} steps",
        "validation_loss_first": losses[0][1],
        "validation_loss_last": losses[-1][1],
        "examples_train": training["examples_train"],
        "examples_validation": training["examples_validation"],
        "loss_plot": dg.MetadataValue.md(png_markdown(plot, f"{game}: {record.id} training and validation loss")),
        "adapter_dir": dg.MetadataValue.path(record.adapter_dir),
    }
    for key in FIGURES:
        if training.get(key) is not None:
            metadata[key] = round(float(training[key]), 3)
    if record.gguf:
        metadata["gguf"] = dg.MetadataValue.path(record.gguf)
    if run is not None:
        metadata |= run_link_metadata({"training": run})
    return metadata


def specialist_evaluation_metadata(game: str, adapter: str, scaffold_version: int, specialist: BatchSummary,
                                   champion: BatchSummary, plot_path: Path, endpoints: dict) -> dict:
    """What ``specialist_evaluation`` shows: the two-model agent against the agent in service, paired."""
    names = (f"v{scaffold_version} + {adapter}", f"v{scaffold_version} one-model")
    return {"outcome": "evaluated", "adapter": adapter, "scaffold": f"v{scaffold_version}",
            **paired_metadata(game, "specialist", specialist, champion, names, plot_path),
            "endpoints": dg.MetadataValue.json(endpoints)}


def specialist_decision_metadata(game: str, decision: VerdictRecord, runs: dict, plots: dict[str, Path]) -> dict:
    """What ``champion_specialist`` shows of a keep-or-rollback decision on a specialist."""
    names = {"adapter": decision.challenger, "scaffold": f"v{decision.scaffold_version}",
             "specialist_before": _no_specialist(decision.champion_before),
             "specialist_after": _no_specialist(decision.champion_after)}
    return challenger_decision_metadata(decision, runs, plots, names, (
        "progression", f"{game}: agent in service vs new specialist"))
