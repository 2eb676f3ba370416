"""The sandbox under the memory store: one folder's plain files, reached only by checked names.

The model's text decides file names and contents, so every name is checked against a strict
pattern and must stay in the root, links, directories, special files and hard-linked files are
refused, reads open with ``O_NOFOLLOW`` and writes go through a temp file in the root and
``os.replace`` (which replaces a link rather than following it). ``MemoryStore`` (``store.py``)
builds the model's operations on these methods and lists the files (``files``).
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from pathlib import Path

from .files import (
    NAME_HINT,
    MemoryLimits,
    MemoryStoreError,
    check_plain,
    join_lines,
    name_problem,
    read_plain,
    replace_file,
    split_lines,
)
from .ops import OpName, quote
from .policy import FilePolicy

# Control characters, Unicode line/paragraph separators and lone surrogates; tab and newline are allowed.
_BAD_IN_CONTENT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
FREE = FilePolicy()
"""The policy of a file the scaffold did not declare: every operation allowed, no line bound."""


class SandboxedFiles(ABC):
    """The plain files of ``root`` (made if missing) within ``limits``, with each file's policy."""

    def __init__(self, root: Path, limits: MemoryLimits) -> None:
        Path(root).mkdir(parents=True, exist_ok=True)
        self.root = Path(os.path.realpath(root))
        self.limits = limits
        self._policies: dict[str, FilePolicy] = {}

    @abstractmethod
    def files(self) -> list[str]:
        """The files, sorted, as refusals name them (the store lists them through its kept reads)."""

    def _content_lines(self, name: str, content: str) -> list[str]:
        bad = _BAD_IN_CONTENT.search(content)
        if bad:
            raise MemoryStoreError(f"content for {name} contains the control character {bad.group()!r}")
        return split_lines(content)

    def _policy(self, name: str) -> FilePolicy:
        return self._policies.get(name, FREE)

    def _path(self, name: str) -> str:
        """The path of ``name`` inside the root, or a refusal naming the problem."""
        problem = name_problem(name, self.limits.max_name_len)
        if problem:
            raise MemoryStoreError(f"invalid file name {quote(name)}: {problem}; {NAME_HINT}")
        path = os.path.join(self.root, name)
        if os.path.realpath(os.path.dirname(path)) != str(self.root):
            raise MemoryStoreError(f"{name} is not inside the memory folder; {NAME_HINT}")
        twins = [entry for entry in os.listdir(self.root) if entry != name and entry.casefold() == name.casefold()]
        if twins:
            raise MemoryStoreError(
                f"invalid file name {quote(name)}: it differs from the existing {twins[0]} only by case, and on a "
                f"case-insensitive filesystem (macOS, Windows) both are one file under {twins[0]}'s policy; "
                f"use {twins[0]} or another name")
        return path

    def _exists(self, name: str) -> bool:
        """Whether ``name`` exists as a plain file; anything else at that path is refused."""
        try:
            info = os.lstat(self._path(name))
        except FileNotFoundError:
            return False
        check_plain(name, info)
        return True

    def _missing(self, name: str) -> MemoryStoreError:
        existing = ", ".join(self.files()) or "none"
        return MemoryStoreError(f"no memory file named {name} (files: {existing}); create it with <|CREATE|>{name}")

    def _read_lines(self, name: str) -> list[str]:
        """Read ``name``; the lstat check gives clear refusals, ``O_NOFOLLOW`` and fstat close the race."""
        if not self._exists(name):
            raise self._missing(name)
        try:
            data = read_plain(self._path(name), name, self.limits.max_file_bytes)
        except FileNotFoundError:
            raise self._missing(name) from None
        try:
            return split_lines(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise MemoryStoreError(f"{name} is not UTF-8 text and cannot be read") from None

    def _write_lines(self, name: str, lines: list[str]) -> None:
        """Replace ``name`` atomically: a temp file in the root, then ``os.replace``."""
        data = join_lines(lines).encode("utf-8")
        if len(data) > self.limits.max_file_bytes:
            hint = (
                f"shorten it with <|WRITE|>{name}|text or DELETE it"
                if self._policy(name).allows(OpName.WRITE)
                else "keep lines short and record only what is new"
            )
            raise MemoryStoreError(
                f"{name} would grow to {len(data)} bytes, over the {self.limits.max_file_bytes}-byte limit;"
                f" nothing was written; {hint}"
            )
        path = self._path(name)
        self._exists(name)  # refuses a link, directory or special file at the target
        replace_file(self.root, path, data)

    def _check_room(self, name: str) -> None:
        if len(self.files()) >= self.limits.max_files:
            raise MemoryStoreError(
                f"cannot create {name}: memory already holds {self.limits.max_files} files, the limit;"
                " reuse an existing file or DELETE one"
            )
