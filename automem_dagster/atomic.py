"""Whole-file writes: a reader sees the old file or the new one, never half of either.

Every artifact the loops hand on (scaffold versions, the lineage and its champion pointer,
summaries, diagnoses, decisions) is written here: to a temp file beside the target, flushed,
then renamed over it, so a crash mid-write leaves the previous version in place.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, data: object) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")
