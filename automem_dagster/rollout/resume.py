"""Resume an interrupted episode at its last recorded step, without asking any model.

A killed or failed episode leaves its steps in ``<episode>.jsonl.partial`` and every memory
operation in its journal, each entry stamped with its step. Resuming resets the game with
the episode's seed and replays the recorded actions, re-executes the journal's operations
in a fresh store step by step, and checks at every step that the replayed observation,
state, reward, progression and end flag, the journal entries and the memory files' digest
equal the recorded ones. Only then are the recorded steps kept and the episode goes on where
it stopped. Per-seed determinism (``tests/unit/rollout/test_seeds.py``) is what makes the replay exact;
where it is not (a game that does not replay, a damaged or doctored file, a journal written
before entries carried their step), ``ResumeMismatch`` says where the two parted and the
runner plays the episode again from step 0, with that note in the trajectory header.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from automem_dagster.agent.baselines import Agent
from automem_dagster.cpu_ledger import LEDGER
from automem_dagster.games.base import StepResult, state_record
from automem_dagster.memory import MemoryStore, format_op, parse_ops
from automem_dagster.memory.journal import JOURNAL_FILE, read_journal
from automem_dagster.rollout.trajectory import TrajectoryError, read_partial

ASIDE_SUFFIX = ".interrupted"
"""The interrupted run's memory folder is renamed ``<episode>.interrupted`` while its journal is replayed."""

GameStep = Callable[[str], Awaitable[StepResult]]


class ResumeMismatch(Exception):
    """The record of an interrupted episode cannot be replayed; the message says where and why."""


@dataclass
class Play:
    """Where an episode stands between two steps, whether it got there by playing or by replay."""

    agent: Agent
    store: MemoryStore | None
    result: StepResult
    step: int = 0
    total_reward: float = 0.0
    note: str = ""
    """Feedback on the previous step's invalid action, shown before the next observation."""

    def shown(self) -> str:
        """The observation the agent sees at this step (and the trajectory records)."""
        return f"{self.note}\n{self.result.observation}" if self.note else self.result.observation

    def begin_step(self) -> None:
        """Stamp the journal with the step and let the agent take the state (synced files)."""
        if self.store is not None:
            self.store.journal.step = self.step
        self.agent.observe_state(self.result.state)

    def end_step(self, action: str, valid: bool, note: str, result: StepResult) -> None:
        self.agent.record_outcome(action, result.reward)
        self.total_reward += result.reward
        self.note = "" if valid else note
        self.step += 1
        self.result = result


@dataclass
class Interrupted:
    """What an interrupted run left: its trajectory header and steps, its journal by step."""

    header: dict
    steps: list[dict]
    journal: dict[int | None, list[dict]]


@LEDGER.charged("digest")
def memory_digest(store: MemoryStore) -> str:
    """A hash of every memory file's name and content, recorded per step to check a replay."""
    digest = hashlib.sha256()
    for name in store.files():
        digest.update(f"{name}\0{store.read_text(name)}\0".encode())
    return digest.hexdigest()[:16]


def set_aside(mem_root: Path) -> Path:
    """Move the interrupted run's memory folder out of the way of a fresh store and return where
    it went. A folder already set aside is from a resume that was itself killed mid-replay: it
    still holds the whole journal, while ``mem_root`` holds only a half-rebuilt one."""
    aside = mem_root.with_name(mem_root.name + ASIDE_SUFFIX)
    if aside.exists():
        shutil.rmtree(mem_root, ignore_errors=True)
    elif mem_root.exists():
        mem_root.rename(aside)
    return aside


def discard(mem_root: Path) -> None:
    """Remove an episode's memory folder and any interrupted one set aside beside it."""
    shutil.rmtree(mem_root, ignore_errors=True)
    shutil.rmtree(mem_root.with_name(mem_root.name + ASIDE_SUFFIX), ignore_errors=True)


def load_interrupted(partial: Path, aside: Path, episode: str, uses_memory: bool) -> Interrupted:
    """Read the partial trajectory and (for the memory agent) the journal set aside in ``aside``."""
    try:
        header, steps = read_partial(partial)
    except (TrajectoryError, OSError, UnicodeDecodeError) as exc:
        raise ResumeMismatch(f"the partial trajectory cannot be read ({exc})") from exc
    if header.get("episode") != episode:
        raise ResumeMismatch(f"the partial trajectory is of episode {header.get('episode')!r}, not {episode!r}")
    journal: dict[int | None, list[dict]] = {}
    if uses_memory and steps:
        path = aside / JOURNAL_FILE
        try:
            for entry in read_journal(path):
                journal.setdefault(entry.get("step"), []).append(entry)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ResumeMismatch(f"the memory journal {path} cannot be read ({exc})") from exc
    return Interrupted(header, steps, journal)


async def replay(play: Play, interrupted: Interrupted, game_step: GameStep) -> None:
    """Bring a freshly reset ``play`` to the end of the recorded steps, checking every one."""
    store = play.store
    if store is not None and interrupted.steps:
        _check_entries(store, 0, interrupted.journal.get(None, []), "before step 0")
    for record in interrupted.steps:
        step = play.step
        _expect(step, "observation", play.shown(), record["observation"])
        mark = len(store.journal.entries) if store is not None else 0
        play.begin_step()
        if store is not None:
            _replay_ops(store, mark, interrupted.journal.get(step, []), step)
            _expect(step, "memory files (digest)", memory_digest(store), record.get("memory_sha"))
        try:
            play.agent.recall(step, play.shown(), record)
        except ValueError as exc:  # a record the agent cannot restore its memory from
            raise ResumeMismatch(f"step {step}: {exc}") from exc
        result = await game_step(record["action"])
        _expect(step, "state", state_record(result.state), record["state"])
        for key in ("reward", "progression", "done"):
            _expect(step, key, getattr(result, key), record[key])
        play.end_step(record["action"], record["action_valid"], record.get("action_note", ""), result)


def _expect(step: int, what: str, replayed: object, recorded: object) -> None:
    if replayed != recorded:
        raise ResumeMismatch(f"step {step}: the replayed {what} differs from the recorded one "
                             f"({_clip(replayed)} != {_clip(recorded)})")


def _replay_ops(store: MemoryStore, mark: int, recorded: list[dict], step: int) -> None:
    """Re-execute the memory operations the model made at ``step`` and compare the step's journal
    entries from ``mark`` on (the harness's syncs, already made, then these) with the recorded ones."""
    for entry in recorded:
        if entry.get("phase") not in ("log", "plan"):
            continue
        ops = parse_ops(entry.get("op", "")).ops
        if len(ops) != 1 or format_op(ops[0]) != entry["op"]:
            raise ResumeMismatch(f"step {step}: journal entry {entry.get('seq')} ({_clip(entry.get('op'))}) "
                                 "is not one memory operation")
        store.execute(ops[0], phase=entry["phase"])
    _check_entries(store, mark, recorded, f"at step {step}")


def _check_entries(store: MemoryStore, mark: int, recorded: list[dict], where: str) -> None:
    replayed = store.journal.to_dicts()[mark:]
    for new, old in zip(replayed, recorded, strict=False):
        if new != old:
            raise ResumeMismatch(f"{where}: replayed journal entry {new['seq']} differs from the recorded one "
                                 f"({_clip(new)} != {_clip(old)})")
    if len(replayed) != len(recorded):
        raise ResumeMismatch(f"{where}: the replay journaled {len(replayed)} memory operations, "
                             f"the interrupted run {len(recorded)}")


def _clip(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
