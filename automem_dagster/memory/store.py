"""The sandboxed per-episode memory store that executes the model's memory operations.

The model's text decides file names and contents, so the store treats every name and
argument as hostile: its files are reached only through the sandbox (``sandbox.py``: checked
flat names, no links or special files, atomic writes), and nothing outside the root is ever
read or written. A refusal is an ``OpResult(ok=False)`` whose text tells the model what to do
instead; nothing is written when an operation is refused.

Redundancy rules: APPEND always appends but flags ``redundant`` when the exact line (after
stripping) was already present, because repeated log lines can be meaningful history.
WRITE always writes and flags the same way. UPSERT of a key whose line already reads
exactly ``key: text`` changes nothing and is flagged. CREATE of an existing file changes
nothing and is flagged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from automem_dagster.cpu_ledger import LEDGER

from .files import (
    DEFAULT_LIMITS,
    MemoryLimits,
    MemoryStoreError,
    join_lines,
    key_of,
    line_present,
    name_problem,
)
from .journal import Journal
from .kept_reads import KeptReads
from .ops import OP_SYNTAX, READ_ONLY_OPS, Op, OpName, OpResult, file_name, format_op, quote, validate_op
from .policy import FilePolicy
from .sandbox import FREE, SandboxedFiles

Phase = Literal["log", "plan"]

# Control characters, Unicode line/paragraph separators and lone surrogates; tab is allowed.
_BAD_IN_LINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_SUMMARY_LINE_CHARS = 120


class MemoryStore(SandboxedFiles):
    """One episode's memory files in ``root``; the model reaches them only through ``execute``."""

    def __init__(self, root: Path, limits: MemoryLimits = DEFAULT_LIMITS, journal: Journal | None = None) -> None:
        super().__init__(root, limits)
        self.journal = journal if journal is not None else Journal()
        if self.journal.path is not None and Path(os.path.realpath(self.journal.path)).is_relative_to(self.root):
            raise ValueError(f"journal path {self.journal.path} is inside the memory root {self.root}; put it outside")
        self._kept = KeptReads(self.root, limits.max_name_len, self.journal)  # the harness's reads (kept_reads.py)
        # one method per file operation, named after it (``_create`` for CREATE); DONE touches no file
        self._handlers: dict[OpName, Callable[[str, tuple[str, ...]], OpResult]] = {
            op: getattr(self, f"_{op.value.lower()}") for op in OpName if op is not OpName.DONE}

    # ----- public API -------------------------------------------------------------------

    @LEDGER.charged("memory")
    def execute(self, op: Op, phase: Phase = "log") -> OpResult:
        """Run one model operation; refusals come back as ``ok=False`` results, never exceptions."""
        if phase not in ("log", "plan"):
            raise ValueError(f"phase must be 'log' or 'plan', got {phase!r}")
        try:
            result = self._run(op, phase)
        except MemoryStoreError as exc:
            result = OpResult(False, str(exc))
        except OSError as exc:
            reason = exc.strerror or exc
            result = OpResult(False, f"{op.name.value} on {op.file} failed ({reason}); nothing was changed")
        self.journal.record(phase, format_op(op), result, self._lines_after(op.file))
        return result

    @LEDGER.charged("memory")
    def init_file(self, name: str, content: str, policy: FilePolicy | None = None) -> OpResult:
        """Create or overwrite a scaffold file with its initial content and policy (harness only).

        Read-only policies do not apply here, but the sandbox, size and file-count checks do;
        a violation raises ``MemoryStoreError`` because it is a scaffold or harness bug.
        """
        chosen = policy if policy is not None else FREE

        def run() -> OpResult:
            self._path(name)
            lines = self._content_lines(name, content)
            if chosen.max_lines is not None and len(lines) > chosen.max_lines:
                raise MemoryStoreError(f"initial content of {name} has {len(lines)} lines, over its max_lines {chosen.max_lines}")
            if not self._exists(name):
                self._check_room(name)
            self._write_lines(name, lines)
            self._policies[name] = chosen
            return OpResult(True, f"initialised {name} ({len(lines)} lines, {chosen.describe()})", changed=True)

        return self._harness(f"init_file {name}", name, run)

    @LEDGER.charged("memory")
    def sync(self, name: str, text: str) -> OpResult:
        """Rewrite a synced file from game state (harness only); raises ``MemoryStoreError`` if refused."""

        def run() -> OpResult:
            self._path(name)
            if self._policy(name).mode != "synced":
                raise MemoryStoreError(f"{name} is not a synced file; declare it with init_file and mode='synced'")
            lines = self._content_lines(name, text)
            changed = not self._exists(name) or self._read_lines(name) != lines
            if changed:
                self._write_lines(name, lines)
            return OpResult(True, f"synced {name} ({len(lines)} lines)", changed=changed)

        return self._harness(f"sync {name}", name, run)

    @LEDGER.charged("memory")
    def read_text(self, name: str) -> str:
        """The content of one file, for the harness (not journaled); raises ``MemoryStoreError``."""
        return join_lines(self._kept.lines(name, self._read_lines))

    @LEDGER.charged("memory")
    def files(self) -> list[str]:
        """The memory files, sorted: valid names of regular, single-link files in the root."""
        return list(self._kept.listing())

    @LEDGER.charged("memory")
    def index(self) -> str:
        """The file index for every prompt: ``name (N lines)`` per file."""
        rows = []
        for name in self._kept.listing():
            try:
                rows.append(f"{name} ({len(self._kept.lines(name, self._read_lines))} lines)")
            except (MemoryStoreError, OSError):
                rows.append(f"{name} (unreadable)")
        return "\n".join(rows) if rows else "(no memory files)"

    # ----- dispatch ---------------------------------------------------------------------

    def _run(self, op: Op, phase: Phase) -> OpResult:
        problem = validate_op(op)
        if problem:
            raise MemoryStoreError(f"{quote(format_op(op))}: {problem}; expected {OP_SYNTAX[op.name]}")
        if phase == "plan" and op.name not in READ_ONLY_OPS:
            raise MemoryStoreError(
                f"{op.name.value} refused: the PLAN phase is read-only; use READ, TAIL, SEARCH, COUNT"
                " or SUMMARIZE, then give your <|ACTION|>"
            )
        if op.name is OpName.DONE:
            return OpResult(True, "memory phase done")
        assert op.file is not None  # validate_op guarantees a file for every other operation
        name = file_name(op.file)  # the parser's rule, so a direct call and model text name the same file
        self._path(name)
        self._check_args(op)
        refusal = self._policy(name).refusal(op.name, name)
        if refusal:
            raise MemoryStoreError(refusal)
        return self._handlers[op.name](name, tuple(arg.strip() for arg in op.args))

    def _harness(self, label: str, name: str, run: Callable[[], OpResult]) -> OpResult:
        """Journal a harness call and raise its refusal, since the harness must not ignore one."""
        try:
            result = run()
        except (MemoryStoreError, OSError) as exc:
            message = str(exc) if isinstance(exc, MemoryStoreError) else f"{label} failed ({exc})"
            self.journal.record("harness", label, OpResult(False, message), self._lines_after(name))
            raise MemoryStoreError(message) from exc
        self.journal.record("harness", label, result, self._lines_after(name))
        return result

    def _check_args(self, op: Op) -> None:
        total = sum(len(arg) for arg in op.args)
        if total > self.limits.max_op_chars:
            raise MemoryStoreError(
                f"{op.name.value} refused: its text is {total} characters, over the"
                f" {self.limits.max_op_chars}-character limit; shorten it"
            )
        for arg in op.args:
            bad = _BAD_IN_LINE.search(arg)
            if bad:
                raise MemoryStoreError(
                    f"{op.name.value} refused: {quote(arg)} contains the control character {bad.group()!r};"
                    " write plain text on one line"
                )
        if op.name is OpName.UPSERT and ":" in op.args[0]:
            raise MemoryStoreError(f"UPSERT refused: the key {quote(op.args[0])} contains ':'; use a key like 12,5 or stairs")

    def _lines_after(self, name: str | None) -> int | None:
        if name is None or name_problem(name, self.limits.max_name_len) is not None:
            return None
        try:
            return len(self._read_lines(name)) if self._exists(name) else None
        except (MemoryStoreError, OSError):
            return None

    # ----- operations -------------------------------------------------------------------

    def _create(self, name: str, args: tuple[str, ...]) -> OpResult:
        if self._exists(name):
            lines = self._read_lines(name)
            return OpResult(True, f"{name} already exists ({len(lines)} lines); nothing changed", redundant=True)
        self._check_room(name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        os.close(os.open(self._path(name), flags, 0o644))
        return OpResult(True, f"created {name} (empty)", changed=True)

    def _read(self, name: str, args: tuple[str, ...]) -> OpResult:
        lines = self._read_lines(name)
        if not lines:
            return OpResult(True, f"{name} is empty (0 lines)", empty=True)
        return OpResult(True, f"{name} ({len(lines)} lines):\n" + self._bounded(lines))

    def _tail(self, name: str, args: tuple[str, ...]) -> OpResult:
        lines = self._read_lines(name)
        if not lines:
            return OpResult(True, f"{name} is empty (0 lines)", empty=True)
        shown = lines[-int(args[0]) :]
        header = f"last {len(shown)} of {len(lines)} lines of {name}:\n"
        return OpResult(True, header + self._bounded(shown, from_end=True))

    def _search(self, name: str, args: tuple[str, ...]) -> OpResult:
        hits = self._matches(name, args[0])
        if not hits:
            return OpResult(True, f"no line in {name} contains {quote(args[0])}", empty=True)
        return OpResult(True, f"{len(hits)} lines in {name} contain {quote(args[0])}:\n" + self._bounded(hits))

    def _count(self, name: str, args: tuple[str, ...]) -> OpResult:
        hits = self._matches(name, args[0])
        return OpResult(True, f"{len(hits)} lines in {name} contain {quote(args[0])}", empty=not hits)

    def _append(self, name: str, args: tuple[str, ...]) -> OpResult:
        lines = self._read_lines(name)
        return self._grow(name, [*lines, args[0]], f"appended a line to {name}", line_present(lines, args[0]))

    def _write(self, name: str, args: tuple[str, ...]) -> OpResult:
        lines = self._read_lines(name)
        if lines == [args[0]]:
            return OpResult(True, f"{name} already holds exactly this line; nothing changed", redundant=True)
        redundant = line_present(lines, args[0])
        self._write_lines(name, [args[0]])
        note = f"; this exact line was already in {name} (redundant write)" if redundant else ""
        return OpResult(True, f"{name} now holds 1 line{note}", redundant=redundant, changed=True)

    def _upsert(self, name: str, args: tuple[str, ...]) -> OpResult:
        key, text = args
        line = f"{key}: {text}"
        lines = self._read_lines(name)
        previous = [existing for existing in lines if key_of(existing) == key]
        if previous == [line]:
            return OpResult(True, f"{name} already has {quote(line)}; nothing changed", redundant=True)
        rest = [existing for existing in lines if key_of(existing) != key]
        verb = "updated" if previous else "added"
        return self._grow(name, [*rest, line], f"{verb} key {quote(key)} in {name}", line_present(lines, line))

    def _delete(self, name: str, args: tuple[str, ...]) -> OpResult:
        if not self._exists(name):
            raise self._missing(name)
        os.unlink(self._path(name))
        self._policies.pop(name, None)
        return OpResult(True, f"deleted {name}", changed=True)

    def _summarize(self, name: str, args: tuple[str, ...]) -> OpResult:
        lines = self._read_lines(name)
        policy = self._policy(name)
        facts = [f"{len(lines)} lines", f"{len(set(lines))} distinct"]
        if policy.mode == "keyed":
            facts.append(f"{len({key_of(line) for line in lines} - {None})} keys")
        parts = [f"{name}: {', '.join(facts)}; {policy.describe()}"]
        clipped = [line if len(line) <= _SUMMARY_LINE_CHARS else line[:_SUMMARY_LINE_CHARS] + "…" for line in lines]
        if len(lines) <= 6:
            parts += ["lines:", *clipped] if lines else []
        else:
            parts += ["first 3:", *clipped[:3], "last 3:", *clipped[-3:]]
        return OpResult(True, "\n".join(parts))

    # ----- helpers ----------------------------------------------------------------------

    def _matches(self, name: str, keyword: str) -> list[str]:
        wanted = keyword.casefold()
        return [line for line in self._read_lines(name) if wanted in line.casefold()]

    def _grow(self, name: str, lines: list[str], done: str, redundant: bool) -> OpResult:
        """Write lines after applying the file's cap, and describe what happened."""
        policy = self._policy(name)
        kept, pruned = policy.prune(lines)
        self._write_lines(name, kept)
        notes = [f"{done} (now {len(kept)} lines)"]
        if pruned:
            notes.append(f"pruned the {pruned} oldest lines to keep the newest {policy.prune_to} (max_lines {policy.max_lines})")
        if redundant:
            notes.append(f"this exact line was already in {name} (redundant write)")
        return OpResult(True, "; ".join(notes), redundant=redundant, changed=True)

    def _bounded(self, lines: list[str], from_end: bool = False) -> str:
        """Join lines within ``max_read_chars``, noting how many were left out and how to see them."""
        budget = self.limits.max_read_chars
        ordered = list(reversed(lines)) if from_end else lines
        kept: list[str] = []
        used = 0
        for line in ordered:
            if used + len(line) + 1 > budget:
                break
            kept.append(line)
            used += len(line) + 1
        if not kept:
            kept = [ordered[0][: budget - 1] + "…"]
        omitted = len(lines) - len(kept)
        if from_end:
            kept.reverse()
            return (f"…(truncated, {omitted} earlier lines; use SEARCH)\n" if omitted else "") + "\n".join(kept)
        return "\n".join(kept) + (f"\n…(truncated, {omitted} more lines; use TAIL or SEARCH)" if omitted else "")
