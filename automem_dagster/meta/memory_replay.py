"""A memory file as it stood at one step of an episode, rebuilt from the episode's op journal.

A rollout keeps each episode's memory only as it ended (``memory/<episode>/files``), but a
meta-LLM reading step 930 needs the file the agent read at step 930. The store is
deterministic, so replaying the journal's model operations (``memory/<episode>/journal.jsonl``)
through a fresh store seeded with the scaffold's initial files gives the file at any step. The
trajectory says which operations each step ran (the ones the scaffold enabled reach the store
and its journal, in the same order), so each journal entry is tied to its step; an entry that
does not match its step's operation, or whose replayed outcome differs from the recorded one,
is reported instead of silently giving a wrong file. Synced files are the harness's, rewritten
from the game state before each step, so they are rendered from the state the trajectory records.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from automem_dagster.games.base import GameState
from automem_dagster.memory import Journal, MemoryStore
from automem_dagster.memory.journal import JOURNAL_FILE
from automem_dagster.memory.store import MemoryStoreError
from automem_dagster.meta.evidence import recorded_op
from automem_dagster.scaffold.model import Scaffold


class ReplayError(ValueError):
    """The journal cannot rebuild the file; the message says why."""


def journal_path(batch_dir: Path, episode: str) -> Path:
    return Path(batch_dir) / "memory" / episode / JOURNAL_FILE


def model_entries(path: Path) -> list[dict]:
    """The journal's entries for the model's operations (log and plan phases), in order."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ReplayError(f"no memory journal at {path} ({exc.strerror}); only memory-agent batches keep one") from exc
    entries = []
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayError(f"{path} line {number} is not JSON ({exc.msg}); the journal is damaged") from exc
        if entry.get("phase") in ("log", "plan"):
            entries.append(entry)
    return entries


def file_at_step(scaffold: Scaffold, steps: list[dict], journal: Path, name: str, step: int) -> str:
    """The content of memory file ``name`` after step ``step``'s operations (``steps`` are the
    episode's step records). Raises ``ReplayError`` naming what is missing or inconsistent."""
    policy = {f.name: f.policy for f in scaffold.files}
    entries = iter(model_entries(journal))
    with tempfile.TemporaryDirectory(prefix="automem-replay-") as tmp:
        store = MemoryStore(Path(tmp) / "files", journal=Journal())
        for f in scaffold.files:
            store.init_file(f.name, f.initial, f.policy)
        for record in steps[: step + 1]:
            for turn in record["turns"]:
                for op_record in turn["ops"]:
                    op = recorded_op(op_record["op"])
                    if op is None or op.name not in scaffold.operations:
                        continue  # never reached the store (memory_agent._execute), so not journaled
                    entry = next(entries, None)
                    if entry is None or entry["op"] != op_record["op"]:
                        raise ReplayError(f"the journal {journal} does not match the trajectory at step {record['step']} "
                                          f"({op_record['op']!r} against {entry and entry['op']!r})")
                    result = store.execute(op, entry["phase"])
                    if result.ok != entry["ok"]:
                        raise ReplayError(f"replaying {op_record['op']!r} at step {record['step']} gave ok={result.ok}, "
                                          f"the journal recorded ok={entry['ok']}")
        if name in policy and policy[name].mode == "synced":
            return _synced(steps[step]["state"], policy[name].sync_source)
        try:
            return store.read_text(name)
        except MemoryStoreError as exc:
            files = ", ".join(store.files()) or "none"
            raise ReplayError(f"no memory file {name!r} at step {step} ({exc}); files then: {files}") from exc


def _synced(state: dict, source: str) -> str:
    """A synced file as the harness writes it from the state the step left (what the next step reads)."""
    position = tuple(state["position"]) if state.get("position") else None
    game_state = GameState(position, state.get("inventory", {}), state.get("vitals", {}), state.get("level", {}))
    return game_state.render(source) + "\n"
