"""File policies: the building blocks a scaffold switches on per memory file.

AutoMem's winning scaffolds changed how files may be written, not only what the prompt
says: a coordinate-keyed map with one line per cell, logs capped by pruning, status files
rewritten from the game state, read-only reference sheets. Each is a ``FilePolicy`` here,
implemented once and chosen by data in the scaffold YAML.

Semantics (the store enforces them):

- ``free``: every operation, including DELETE.
- ``append_only``: APPEND only; WRITE, UPSERT and DELETE are refused (a log keeps history).
- ``keyed``: UPSERT only; APPEND, WRITE and DELETE are refused with a message pointing to
  ``<|UPSERT|>f|key|text``, so the file never holds two lines for one key.
- ``reference``: read-only to the model, pre-filled by the harness.
- ``synced``: read-only to the model, rewritten by the harness from ``sync_source``.
- ``max_lines``: when an APPEND or UPSERT leaves more lines than this, the oldest lines are
  dropped so the newest ``prune_to`` remain. UPSERT moves a key's line to the end, so in a
  keyed file the oldest lines are the least recently updated keys.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .ops import OpName

Mode = Literal["free", "append_only", "keyed", "reference", "synced"]
SyncSource = Literal["position", "inventory", "vitals", "level", "status"]

WRITE_OPS = frozenset({OpName.APPEND, OpName.WRITE, OpName.UPSERT, OpName.DELETE})

_ALLOWED_WRITES: dict[str, frozenset[OpName]] = {
    "free": WRITE_OPS,
    "append_only": frozenset({OpName.APPEND}),
    "keyed": frozenset({OpName.UPSERT}),
    "reference": frozenset(),
    "synced": frozenset(),
}

_RULE: dict[str, str] = {
    "append_only": "is append-only: add a line with <|APPEND|>{f}|text; it cannot be rewritten, upserted or deleted",
    "keyed": (
        "is keyed (one line per key): use <|UPSERT|>{f}|key|text, which replaces that key's line;"
        " APPEND, WRITE and DELETE are not allowed"
    ),
    "reference": "is a read-only reference file: use READ, TAIL, SEARCH, COUNT or SUMMARIZE",
    "synced": "is rewritten from the game state every step and is read-only: READ it instead of writing it",
}


class FilePolicy(BaseModel):
    """How the model may change one memory file, and how long it may grow."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode = "free"
    max_lines: int | None = Field(default=None, ge=1)
    prune_to: int | None = Field(default=None, ge=0)
    sync_source: SyncSource | None = None

    @model_validator(mode="after")
    def _consistent(self) -> FilePolicy:
        """Check the cross-field rules and default ``prune_to`` to half the cap."""
        if self.prune_to is not None:
            if self.max_lines is None:
                raise ValueError("prune_to is set but max_lines is not: set max_lines too, or drop prune_to")
            if self.prune_to >= self.max_lines:
                raise ValueError(f"prune_to ({self.prune_to}) must be less than max_lines ({self.max_lines})")
        elif self.max_lines is not None:
            self.prune_to = self.max_lines // 2
        if self.mode == "synced" and self.sync_source is None:
            raise ValueError("sync_source is required when mode is 'synced': position, inventory, vitals, level or status")
        if self.mode != "synced" and self.sync_source is not None:
            raise ValueError(f"sync_source is only for mode 'synced', but mode is {self.mode!r}")
        return self

    def allows(self, op: OpName) -> bool:
        """Whether the model may use ``op`` on this file (reads are always allowed)."""
        return op not in WRITE_OPS or op in _ALLOWED_WRITES[self.mode]

    def refusal(self, op: OpName, file: str) -> str | None:
        """The message shown to the model when ``op`` is not allowed on ``file``, else None."""
        if self.allows(op):
            return None
        return f"{op.value} refused: {file} " + _RULE[self.mode].format(f=file)

    def prune(self, lines: list[str]) -> tuple[list[str], int]:
        """Apply the line cap: over ``max_lines``, keep the newest ``prune_to`` lines; also return how many went."""
        if self.max_lines is None or self.prune_to is None or len(lines) <= self.max_lines:
            return lines, 0
        kept = lines[len(lines) - self.prune_to :]
        return kept, len(lines) - len(kept)

    def describe(self) -> str:
        """A short phrase for SUMMARIZE and the journal, e.g. ``keyed, max 200 lines (prunes to 100)``."""
        parts = [self.mode.replace("_", "-")]
        if self.sync_source is not None:
            parts[0] += f" from {self.sync_source}"
        if self.mode in ("reference", "synced"):
            parts[0] += " (read-only)"
        if self.max_lines is not None:
            parts.append(f"max {self.max_lines} lines (prunes to {self.prune_to})")
        return ", ".join(parts)
