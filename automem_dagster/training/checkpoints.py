"""A run's identity and checkpoints: the fingerprint of what shapes its weights, the checkpoint a
rerun resumes from (refusing another run's), and the adapter written atomically."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from automem_dagster.file_hashing import hash_file_into
from automem_dagster.training.settings import LoraSettings
from automem_dagster.training.sft_result import CHECKPOINTS, DATASET_FILE, RUN_FILE, TrainingError

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_TRAINER_STATE = "trainer_state.json"


def run_fingerprint(settings: LoraSettings, dataset_dir: Path, *, base: str, max_steps: int | None,
                    validation_fraction: float, seed: int) -> dict[str, Any]:
    """What shapes a run's weights, each part hashed, and one fingerprint over all of them. Checkpoint
    and evaluation intervals are left out: they change when weights are saved, not what they are."""
    digest = hashlib.sha256()
    hash_file_into(digest, Path(dataset_dir) / DATASET_FILE)
    parts = {
        "settings": settings.model_dump(mode="json"),
        "dataset_sha256": digest.hexdigest(),
        "base": base,
        "max_steps": max_steps,
        "validation_fraction": validation_fraction,
        "seed": seed,
    }
    return {"fingerprint": hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest(), "parts": parts}


def _checkpoints(ckpt_dir: Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) of every checkpoint directory, oldest first. The trainer writes the
    trainer state last, so a checkpoint without a readable one was cut off by a killed process."""
    found = []
    if ckpt_dir.is_dir():
        for p in ckpt_dir.iterdir():
            m = _CHECKPOINT.match(p.name)
            if m and p.is_dir():
                found.append((int(m.group(1)), p, _complete(p)))
    return sorted(found)


def _complete(path: Path) -> bool:
    try:
        json.loads((path / _TRAINER_STATE).read_text())
    except (OSError, ValueError):
        return False
    return True


def resume_point(out_dir: Path, identity: dict[str, Any]) -> Path | None:
    """The newest complete checkpoint of this run under ``out_dir``, or None to start afresh.

    Raises ``TrainingError`` when a complete checkpoint exists but ``run.json`` says it belongs to
    another run (or nothing says which run it belongs to). Checkpoints cut off by a killed process
    are removed, since the resumed run writes them again.
    """
    out_dir = Path(out_dir)
    found = _checkpoints(out_dir / CHECKPOINTS)
    complete = [(step, p) for step, p, ok in found if ok]
    last = complete[-1][1] if complete else None
    if last is not None:
        run_file = out_dir / RUN_FILE
        try:
            stored = json.loads(run_file.read_text())
        except (OSError, ValueError):
            stored = None
        if not isinstance(stored, dict) or stored.get("fingerprint") != identity["fingerprint"]:
            if isinstance(stored, dict) and isinstance(stored.get("parts"), dict):
                changed = sorted(k for k in identity["parts"] if stored["parts"].get(k) != identity["parts"][k])
                why = f"{', '.join(changed) or 'the run'} changed since they were written"
            else:
                why = f"{run_file} is missing or unreadable, so nothing says which run they belong to"
            raise TrainingError(
                f"{out_dir / CHECKPOINTS} holds checkpoints (newest {last.name}) of another run: {why}. Resuming "
                f"would mix two runs. Use a new output directory, or delete {out_dir / CHECKPOINTS} to train this "
                "run from the start.")
    for step, p, ok in found:
        if not ok and (last is None or step > complete[-1][0]):
            shutil.rmtree(p, ignore_errors=True)
    return last


def save_adapter(model, adapter_dir: Path) -> None:
    """``save_pretrained`` into a temp directory beside ``adapter_dir``, then renamed over it."""
    tmp = adapter_dir.with_name(f".{adapter_dir.name}.tmp-{os.getpid()}")
    old = adapter_dir.with_name(f".{adapter_dir.name}.old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    if adapter_dir.exists():
        os.replace(adapter_dir, old)
    os.replace(tmp, adapter_dir)
    shutil.rmtree(old, ignore_errors=True)
