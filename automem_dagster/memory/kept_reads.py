"""What the harness last read of a memory root, kept until the root changes.

The harness reads every file several times a step (the index in each prompt, which files have
content, the step's digest). The listing and the lines read since are kept while the journal holds
as many entries and the root's own inode, type and modification and change times are as they were:
every write of the store is journaled, and a file created, removed, renamed or linked into the root
from outside moves the root's times. A file rewritten in place from outside (the store never writes
in place) is seen at the store's next operation.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from .files import MemoryStoreError, name_problem
from .journal import Journal


class KeptReads:
    """The listing of ``root`` and the lines read since, for one store."""

    def __init__(self, root: Path, max_name_len: int, journal: Journal) -> None:
        self.root = root
        self.journal = journal
        self.max_name_len = max_name_len
        self._listed: tuple | None = None
        self._names: list[str] = []
        self._lines: dict[str, list[str]] = {}

    def listing(self) -> list[str]:
        """The valid names of regular, single-link files in the root, sorted."""
        try:
            info = os.lstat(self.root)
        except FileNotFoundError:
            info = None
        key = (len(self.journal.entries), info and (info.st_ino, info.st_mode, info.st_mtime_ns, info.st_ctime_ns))
        if key == self._listed:
            return self._names
        if os.path.realpath(self.root) != str(self.root):
            raise MemoryStoreError(f"the memory folder {self.root} was moved or replaced by a link; not listing it")
        names = []
        with os.scandir(self.root) as entries:
            for entry in entries:
                if name_problem(entry.name, self.max_name_len) is not None:
                    continue
                entry_info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(entry_info.st_mode) and entry_info.st_nlink == 1:
                    names.append(entry.name)
        self._listed, self._names, self._lines = key, sorted(names), {}
        return self._names

    def lines(self, name: str, read: Callable[[str], list[str]]) -> list[str]:
        """``read(name)``, kept until the next listing finds the root changed."""
        names = self.listing()
        if name in self._lines:
            return self._lines[name]
        lines = read(name)
        if name in names:
            self._lines[name] = lines
        return lines
