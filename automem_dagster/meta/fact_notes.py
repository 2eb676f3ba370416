"""How often the memory model writes down a needed fact when the game shows it: the behaviour the
proficiency loop trains, read straight from trajectories (issue 53, point 4).

A memory game (``games/recall.py``) shows each needed fact once and asks for it later, so a fact is
kept only if the LOG of the step that shows it writes it: later steps no longer show it, and PLAN
only reads. A fact counts as written when a write of that LOG (APPEND, WRITE or UPSERT, carried out)
names its answer and no other of the ways the question will offer (``key: WEST wing`` for the key's
wing; ``the key is west or east`` names none). A fact the episode never showed (it ended first)
counts neither way. Progression says whether memory paid off; this says whether the memory model
did its part, whatever the actor then made of it, so a specialist can be compared with its base
on the same seeds without playing the episodes to their end (``fact_horizon``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from automem_dagster.games import make_game
from automem_dagster.games.recall import NeededFact, named_ways
from automem_dagster.memory.ops import parse_ops
from automem_dagster.meta.decisions import WRITE_OPS
from automem_dagster.metrics.progression import ProgressionSummary, summarize_progression
from automem_dagster.rollout.trajectory import finished_episodes, read_trajectory


class FactNotesError(ValueError):
    """A game or batch this measure cannot read; the message names it and what to do."""


@dataclass(frozen=True)
class FactNote:
    """One needed fact of one episode: the step that showed it (None: the episode ended first) and
    whether that step's LOG wrote it."""

    seed: int
    subject: str
    answer: str
    shown_at: int | None
    written: bool


@dataclass(frozen=True)
class FactRate:
    """A batch's facts written over facts shown, and each seed's share (what a paired comparison pairs)."""

    written: int
    shown: int
    per_seed: dict[int, float]

    @property
    def summary(self) -> ProgressionSummary:
        """Mean and standard error over seeds, in percent."""
        return summarize_progression(list(self.per_seed.values()))


def needed_facts(game: str, seed: int) -> list[NeededFact]:
    """The facts ``game`` needs on ``seed``; a game that names none is refused by name."""
    return _reset(game, seed)[1]


def fact_horizon(game: str, seeds: list[int]) -> int:
    """Steps an episode must last for every needed fact of ``seeds`` to have been shown and LOGged: the
    memory games show them at fixed steps whatever the actions, so walking on finds them."""
    last = 0
    for seed in seeds:
        played, facts, result = _reset(game, seed)
        waiting, step = [f.shown for f in facts], 0
        while True:
            waiting = [shown for shown in waiting if shown not in result.observation]
            if not waiting:
                break
            if result.done:
                raise FactNotesError(f"{game} seed {seed}: the episode ends before it shows {waiting[0]!r}")
            result, step = played.step(played.default_action), step + 1
        last = max(last, step)
    return last + 1


def _reset(game: str, seed: int):
    """The game reset on ``seed``, its needed facts and its first result."""
    played = make_game(game)
    if not hasattr(played, "needed_facts"):
        raise FactNotesError(f"game {game!r} names no needed facts: the memory games keydoor and courier do "
                             "(games/recall.py); measure other games by progression and behaviour metrics")
    first = played.reset(seed)
    return played, played.needed_facts(), first


def episode_fact_notes(path: Path) -> list[FactNote]:
    """The needed facts of one finished episode, each with whether the LOG at its showing wrote it."""
    header, steps, _ = read_trajectory(path)
    seed = int(header["seed"])
    out = []
    for fact in needed_facts(header["game"], seed):
        shown_at = next((t for t, step in enumerate(steps) if fact.shown in step["observation"]), None)
        written = shown_at is not None and any(
            named_ways(text, fact.ways) == [fact.answer] for text in log_writes(steps[shown_at]))
        out.append(FactNote(seed, fact.subject, fact.answer, shown_at, written))
    return out


def log_writes(step: dict) -> list[str]:
    """What the step's LOG wrote and the store carried out: each write's arguments after the file name
    (an UPSERT's key and text both count)."""
    texts = []
    for turn in step["turns"]:
        if turn["phase"] != "log":
            continue
        for record in turn["ops"]:
            ops = parse_ops(record["op"]).ops if record["ok"] else []
            texts += [" ".join(op.args) for op in ops if op.name in WRITE_OPS]
    return texts


def batch_fact_rate(batch: Path) -> FactRate:
    """Facts written over facts shown in a batch of finished memory-agent episodes."""
    paths = finished_episodes(Path(batch))
    if not paths:
        raise FactNotesError(f"{batch} holds no finished episode: play the batch first")
    written = shown = 0
    per_seed: dict[int, float] = {}
    for path in paths:
        notes = [n for n in episode_fact_notes(path) if n.shown_at is not None]
        if notes:
            per_seed[notes[0].seed] = sum(n.written for n in notes) / len(notes)
        written += sum(n.written for n in notes)
        shown += len(notes)
    if not shown:
        raise FactNotesError(f"no episode of {batch} lasted until a needed fact was shown: play at least "
                             "fact_horizon(game, seeds) steps")
    return FactRate(written, shown, per_seed)
