"""The op journal: every memory operation of an episode with its outcome, in order.

The behaviour metrics (redundant writes, empty searches) and the proficiency loop's mining
read it, so each entry keeps the flags the store computed rather than re-deriving them from
result text. Entries are kept in memory and, when a path is given, appended to a JSONL file
as they happen so a crashed episode still leaves its journal behind. Each entry names the
episode step it belongs to (``Journal.step``, set by the rollout runner), which is how an
interrupted episode's memory is rebuilt step by step when it resumes (``rollout.resume``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from automem_dagster.datafiles import appended_records

from .ops import OpResult

JOURNAL_FILE = "journal.jsonl"
"""An episode's journal, in its memory folder beside the memory files (``files/``)."""

JournalPhase = Literal["log", "plan", "harness"]


@dataclass(frozen=True)
class JournalEntry:
    """One operation. ``op`` is its token text (or ``init_file f`` / ``sync f`` for the harness)."""

    seq: int
    phase: JournalPhase
    op: str
    ok: bool
    result: str
    redundant: bool
    empty: bool
    changed: bool
    lines_after: int | None
    step: int | None = None
    """The episode step the operation belongs to; None before the first step (``init_file``)."""


class Journal:
    """Collects entries in ``entries`` and appends each to ``path`` (JSONL) when one is given.

    The caller picks ``path``; ``MemoryStore`` refuses one inside its sandbox so the model
    can never read or rewrite its own journal. ``seq`` counts from 0. ``step`` is stamped on
    every entry recorded until the caller sets another.
    """

    def __init__(self, path: Path | None = None, max_result_chars: int = 1_000) -> None:
        self.path = path
        self.max_result_chars = max_result_chars
        self.entries: list[JournalEntry] = []
        self.step: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, phase: JournalPhase, op: str, result: OpResult, lines_after: int | None) -> JournalEntry:
        """Append one entry, truncating the result text so a long READ cannot bloat the journal."""
        text = result.text
        if len(text) > self.max_result_chars:
            text = text[: self.max_result_chars] + f"…({len(result.text) - self.max_result_chars} more chars)"
        entry = JournalEntry(
            seq=len(self.entries),
            phase=phase,
            op=op,
            ok=result.ok,
            result=text,
            redundant=result.redundant,
            empty=result.empty,
            changed=result.changed,
            lines_after=lines_after,
            step=self.step,
        )
        self.entries.append(entry)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(asdict(entry)) + "\n")
        return entry

    def to_dicts(self) -> list[dict[str, Any]]:
        """The entries as plain dicts, e.g. for a trajectory file or a DataFrame."""
        return [asdict(entry) for entry in self.entries]


def read_journal(path: Path) -> Iterator[dict[str, Any]]:
    """The entries of a journal file in order, as written (a last line cut short by a killed process
    is dropped); a line that is not an entry raises ``ValueError`` naming it."""
    for number, entry in appended_records(path, "journal", ValueError):
        if not isinstance(entry, dict):
            raise ValueError(f"journal {path} line {number} is not an entry (a JSON object)")
        yield entry
