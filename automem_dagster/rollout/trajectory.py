"""Trajectory files: one JSONL file per episode, written so that nothing is ever half there.

Lines are ``{"type": "header"|"step"|"end", ...}``. While an episode runs its lines go to
``<episode>.jsonl.partial`` (flushed every step, so progress is visible); only a finished
episode is renamed to ``<episode>.jsonl``. A finished file therefore always holds a header,
every step and an end line; a partial one is discarded on resume and the episode replayed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

PARTIAL_SUFFIX = ".partial"


class TrajectoryError(ValueError):
    """A trajectory file that cannot be read as a complete episode."""


def episode_id(game: str, seed: int) -> str:
    return f"{game.replace(':', '-')}__seed{seed}"


def trajectory_path(batch_dir: Path, episode: str) -> Path:
    """Where a batch keeps the finished trajectory of ``episode``."""
    return Path(batch_dir) / "trajectories" / f"{episode}.jsonl"


class TrajectoryWriter:
    """Streams one episode's lines to its partial file and publishes it atomically on ``finish``.

    Opening truncates a partial file left by an interrupted run, which is how a replayed
    episode never duplicates steps."""

    def __init__(self, path: Path, header: dict):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + PARTIAL_SUFFIX)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = open(self.partial, "w")
        self._write({"type": "header", **header})

    def _write(self, record: dict) -> None:
        assert self._fh is not None, "trajectory already finished"
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()

    def step(self, record: dict) -> None:
        self._write({"type": "step", **record})

    def finish(self, summary: dict) -> Path:
        self._write({"type": "end", **summary})
        assert self._fh is not None
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None
        os.replace(self.partial, self.path)
        return self.path

    def abandon(self) -> None:
        """Close without publishing: the partial file stays for inspection and is replaced on resume."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_trajectory(path: Path) -> tuple[dict, list[dict], dict]:
    """(header, steps, end) of a finished episode; a clear error for anything else."""
    path = Path(path)
    header, steps, end = None, [], None
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TrajectoryError(f"cannot read trajectory {path}: {exc}") from exc
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryError(
                f"trajectory {path} line {number} is not JSON ({exc.msg}); the file is corrupted: "
                "delete it and rerun the rollout to replay that episode"
            ) from exc
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "header" and header is None and number == 1:
            header = record
        elif kind == "step" and header is not None and end is None:
            if record.get("step") != len(steps):
                raise TrajectoryError(f"trajectory {path} line {number}: expected step {len(steps)}, found {record.get('step')}")
            steps.append(record)
        elif kind == "end" and header is not None and end is None:
            end = record
        else:
            raise TrajectoryError(f"trajectory {path} line {number}: unexpected record type {kind!r}")
    if header is None or end is None:
        raise TrajectoryError(f"trajectory {path} is incomplete (no {'header' if header is None else 'end'} line)")
    return header, steps, end


def finished_episodes(batch_dir: Path) -> list[Path]:
    return sorted((Path(batch_dir) / "trajectories").glob("*.jsonl"))
