"""Cross-process locks for the files rounds read, change and write back.

Two rounds of one game family (the weekly schedule and a manual run, two Dagster runs) both
load the lineage or the specialist registry, change it and save it; without a lock the later
save drops the earlier one's change. ``file_lock`` takes an exclusive ``fcntl.flock`` on a
sibling ``<file>.lock`` for the whole load-change-save: the kernel releases it when the holder
exits or dies, so a killed round never leaves a stale lock (the empty lock file stays, harmless).
POSIX only, like the rest of the project's process handling.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEFAULT_TIMEOUT_S = 600.0
"""Longer than any load-change-save takes; a wait this long means the holder is stuck."""


class LockTimeout(RuntimeError):
    """Another process held the lock for longer than the timeout; the message names the file."""


def lock_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".lock")


@contextmanager
def file_lock(path: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (waiting up to ``timeout_s`` for another holder)."""
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(
                        f"{path} stayed locked by another process for {timeout_s:.0f}s (lock {lock}): another round "
                        "of this game family is updating it; wait for it to finish, then rerun"
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
