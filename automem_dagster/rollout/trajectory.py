"""Trajectory files: one JSONL file per episode, written so that nothing is ever half there.

Lines are ``{"type": "header"|"step"|"end", ...}``. While an episode runs its lines go to
``<episode>.jsonl.partial`` (flushed every step, so progress is visible); only a finished
episode is renamed to ``<episode>.jsonl``. A finished file therefore always holds a header,
every step and an end line; a partial one is where a rerun resumes the episode
(``rollout.resume``): its steps are replayed without model calls and kept.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from automem_dagster.atomic import write_text_atomic
from automem_dagster.cpu_ledger import LEDGER
from automem_dagster.datafiles import appended_records, read_json_file, read_text_file

BATCH_FILE = "batch.json"

PARTIAL_SUFFIX = ".partial"


class TrajectoryError(ValueError):
    """A trajectory file that cannot be read as a complete episode."""


def episode_id(game: str, seed: int) -> str:
    return f"{game.replace(':', '-')}__seed{seed}"


def trajectory_path(batch_dir: Path, episode: str) -> Path:
    """Where a batch keeps the finished trajectory of ``episode``."""
    return Path(batch_dir) / "trajectories" / f"{episode}.jsonl"


def partial_path(path: Path) -> Path:
    """Where the lines of the episode finishing at ``path`` go while it runs."""
    return Path(path).with_name(Path(path).name + PARTIAL_SUFFIX)


class TrajectoryWriter:
    """Streams one episode's lines to its partial file and publishes it atomically on ``finish``.

    Opening replaces a partial file left by an interrupted run with the header and ``steps``
    (the step lines a resumed episode keeps), written whole before the swap, so a kill while
    opening leaves the old partial file and an episode never duplicates or loses steps."""

    def __init__(self, path: Path, header: dict, steps: list[dict] = ()):
        self.path = Path(path)
        self.partial = partial_path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = [{"type": "header", **header}, *({"type": "step", **s} for s in steps)]
        write_text_atomic(self.partial, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))
        self._fh: IO[str] | None = open(self.partial, "a")

    @LEDGER.charged("trajectory")
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


STEP_KEYS = ("observation", "action", "action_valid", "reward", "progression", "done", "warnings", "turns",
             "state", "wall_s")
"""What every step line holds (``rollout.runner`` writes them), so readers can index them freely."""
TURN_KEYS = ("phase", "text", "ops", "errors", "input_tokens", "output_tokens", "latency_s")
_REPLAY = "delete it and rerun the same rollout command to replay that episode (nothing else refers to it)"


def read_trajectory(path: Path) -> tuple[dict, list[dict], dict]:
    """(header, steps, end) of a finished episode; a clear error for anything else.

    Errors name the file, the line and what to do. A single blank line at the end (an editor's
    final newline) is tolerated; a blank line anywhere else is corruption. Nothing is changed.
    """
    path = Path(path)
    header, steps, end = None, [], None
    lines = read_text_file(path, "trajectory", TrajectoryError, _REPLAY).splitlines()
    if lines and not lines[-1].strip():
        lines.pop()
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryError(
                f"trajectory {path} line {number} is not JSON ({exc.msg}); the file is corrupted: {_REPLAY}"
            ) from exc
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "header" and header is None and number == 1:
            header = record
        elif kind == "step" and header is not None and end is None:
            if record.get("step") != len(steps):
                raise TrajectoryError(f"trajectory {path} line {number}: expected step {len(steps)}, "
                                      f"found {record.get('step')}: {_REPLAY}")
            _check_step(path, number, record)
            steps.append(record)
        elif kind == "end" and header is not None and end is None:
            end = record
        else:
            raise TrajectoryError(f"trajectory {path} line {number}: unexpected record type {kind!r}: {_REPLAY}")
    if header is None or end is None:
        raise TrajectoryError(f"trajectory {path} is incomplete (no {'header' if header is None else 'end'} line): "
                              f"{_REPLAY}")
    return header, steps, end


def read_partial(path: Path) -> tuple[dict, list[dict]]:
    """(header, steps) of an interrupted episode's partial file, for resuming it.

    A last line cut short by a killed process is dropped (that step is played again); any
    other damage raises ``TrajectoryError`` naming the line, and the caller replays from step 0."""
    header, steps = None, []
    for number, record in appended_records(path, "partial trajectory", TrajectoryError):
        record = record if isinstance(record, dict) else {}
        kind = record.get("type")
        if kind == "header" and number == 1:
            header = record
        elif kind == "step" and header is not None and record.get("step") == len(steps):
            _check_step(path, number, record)
            steps.append(record)
        elif kind != "end" or header is None:
            raise TrajectoryError(f"partial trajectory {path} line {number}: unexpected record "
                                  f"{kind!r} (step {record.get('step')!r} where step {len(steps)} was due)")
    if header is None:
        raise TrajectoryError(f"partial trajectory {path} has no header line")
    return header, steps


def _check_step(path: Path, number: int, record: dict) -> None:
    """Refuse a step line that lacks what readers index, naming the missing keys, so a damaged line
    fails here with its file and line instead of as a KeyError deep in the metrics."""
    missing = [k for k in STEP_KEYS if k not in record]
    turns = record.get("turns")
    if not missing and not isinstance(turns, list):
        missing = ["turns (a list)"]
    for turn in turns if not missing else ():
        lacking = [k for k in TURN_KEYS if not isinstance(turn, dict) or k not in turn]
        if lacking:
            missing = [f"turns[{turns.index(turn)}].{k}" for k in lacking]
            break
    if missing:
        raise TrajectoryError(f"trajectory {path} line {number} (step {record['step']}) lacks {', '.join(missing)}; "
                              f"the file is damaged or was not written by this rollout: {_REPLAY}")


def finished_episodes(batch_dir: Path) -> list[Path]:
    return sorted((Path(batch_dir) / "trajectories").glob("*.jsonl"))


def read_manifest(batch_dir: Path) -> dict:
    """A batch's ``batch.json`` (what the batch is: game, scaffold, seeds, agent), with errors that name
    the file and what to do; readers and the resume check both come through here."""
    path = Path(batch_dir) / BATCH_FILE
    advice = ("restore it from version control, or rerun the rollout with a new --out folder "
              "(the trajectories in this one are kept)")
    missing = (f"is {Path(batch_dir)} a batch folder? Pass the folder a rollout wrote "
               "(it holds batch.json and trajectories/)")
    manifest = read_json_file(path, "batch manifest", TrajectoryError, advice, missing)
    if not isinstance(manifest, dict) or "game" not in manifest:
        raise TrajectoryError(f"batch manifest {path} is not a batch description (no \"game\" field): {advice}")
    return manifest
