"""What a batch holds that a replay must reproduce, for tests that compare two ways of playing one batch."""

import json
from pathlib import Path

from automem_dagster.rollout import read_trajectory

VOLATILE = {"started_at", "finished_at", "wall_s", "game_s", "latency_s", "request_s", "wall_s_per_step",
            "model_s_per_step", "retry_s", "model_s", "resumes"}
"""Timings and clock times, which differ between any two plays, and ``resumes``, the record of where an
interrupted episode was resumed, which a play without interruption does not have."""


def _clean(record):
    if isinstance(record, dict):
        return {k: _clean(v) for k, v in record.items() if k not in VOLATILE}
    if isinstance(record, list):
        return [_clean(v) for v in record]
    return record


def batch_content(batch: Path) -> tuple[dict, dict, dict, dict]:
    """Trajectories, memory files, summary and manifest of a batch, without times or absolute paths."""
    batch = Path(batch)
    trajectories = {p.name: _clean(list(read_trajectory(p))) for p in sorted((batch / "trajectories").glob("*.jsonl"))}
    memory = {str(p.relative_to(batch)): p.read_text() for p in sorted((batch / "memory").rglob("*")) if p.is_file()}
    summary = _clean(json.loads((batch / "summary.json").read_text()))
    summary.pop("out_dir")
    return trajectories, memory, summary, json.loads((batch / "batch.json").read_text())
