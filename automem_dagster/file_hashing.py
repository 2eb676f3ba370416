"""Hashing files by streaming them: an adapter's weights, a training dataset and a served LoRA file
can be hundreds of megabytes, so they are read in 1 MiB blocks, never whole."""

from __future__ import annotations

from pathlib import Path

BLOCK = 1 << 20


def hash_file_into(digest, path: Path) -> None:
    """Feed ``path``'s bytes into ``digest`` (a ``hashlib`` object), block by block."""
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            digest.update(block)
