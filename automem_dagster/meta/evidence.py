"""Deterministic evidence for the meta-LLM's diagnosis, extracted from trajectory files alone.

A meta-LLM reading thousands of steps misses things and invents others. So before it reads a
batch, this module pins down the facts a person would look for first: the failures AutoMem's
winning scaffolds removed (redundant map writes, empty searches, stuck and oscillating
stretches) plus invalid actions, malformed turns and refused operations, each as a
``FailurePoint`` the diagnosis can cite by episode and step; how each memory file was used,
including the files nobody reads or writes (candidates for removal or for automatic syncing);
how fast the prompt grows (what pruning fixes); and where progression was gained.

The definitions are the behaviour metrics' own (``WRITE_TOKENS``, ``SEARCH_TOKENS``,
``progress_fingerprint``, ``is_reversal``), so a failure point here and a rate in the metrics
always count the same events: a step is stuck when it leaves position, inventory and level as
the previous step left them, and oscillating when its move reverses the previous move.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from itertools import groupby
from pathlib import Path
from typing import Literal, get_args

from automem_dagster.agent.grammar import READ_OPS
from automem_dagster.agent.signals import is_reversal, progress_fingerprint
from automem_dagster.memory import Op, parse_ops
from automem_dagster.memory.ops import quote
from automem_dagster.metrics.behaviour import SEARCH_TOKENS, WRITE_TOKENS
from automem_dagster.rollout.trajectory import read_trajectory

FailureKind = Literal[
    "redundant_write", "empty_search", "stuck", "oscillation", "invalid_action", "malformed_turn", "refused_op",
]
FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)

CONTEXT_WINDOW = 5
"""Steps averaged for the input tokens per step at the start and at the end of an episode."""


@dataclass(frozen=True)
class FailurePoint:
    """One thing that went wrong, at one step or over a stretch of steps (both ends inclusive).

    A stuck stretch starts at its first step that changed nothing; an oscillation stretch
    starts one step before its first reversal, because that move is half of the back and forth.
    """

    episode: str
    step_start: int
    step_end: int
    kind: FailureKind
    detail: str


@dataclass
class FileUsage:
    """Successful reads (READ, TAIL, SEARCH, COUNT, SUMMARIZE) and writes (APPEND, WRITE, UPSERT)
    by the model, the redundant ones among those writes, and refused operations of any kind."""

    reads: int = 0
    writes: int = 0
    redundant_writes: int = 0
    refused: int = 0


@dataclass(frozen=True)
class ContextGrowth:
    """Input tokens per step (all model calls of a step together): mean of the first and of the
    last ``CONTEXT_WINDOW`` steps, and the least-squares slope in tokens per step per step."""

    start_tokens_per_step: float
    end_tokens_per_step: float
    slope: float


@dataclass(frozen=True)
class ProgressionGain:
    """A step after which the episode's progression was higher than ever before."""

    step: int
    progression: float


@dataclass(frozen=True)
class EpisodeEvidence:
    episode: str
    path: str
    seed: int
    steps: int
    progression: float
    gains: list[ProgressionGain]
    context: ContextGrowth


@dataclass(frozen=True)
class Evidence:
    """Everything ``collect_evidence`` found in a batch; ``as_dict`` is plain JSON-ready data."""

    episodes: list[EpisodeEvidence]
    failure_points: list[FailurePoint]
    files: dict[str, FileUsage]
    never_read: list[str]
    never_written: list[str]

    def as_dict(self) -> dict:
        return asdict(self)


def collect_evidence(trajectory_paths: Iterable[Path], files: list[str] | None = None) -> Evidence:
    """Read finished trajectories and extract their failure points, file usage and growth.

    ``files`` are the scaffold's file names: without them a file the model never touched
    would not appear at all, and such a file is exactly what a diagnosis should hear about.
    """
    usage = {name: FileUsage() for name in files or []}
    episodes: list[EpisodeEvidence] = []
    points: list[FailurePoint] = []
    for path in trajectory_paths:
        header, steps, end = read_trajectory(path)
        twin = next((e.path for e in episodes if e.episode == header["episode"]), None)
        if twin is not None:
            raise ValueError(f"{path} and {twin} both hold episode {header['episode']}; failure points name their "
                             "episode, so pass each episode of a batch once")
        points += episode_failures(header["episode"], steps)
        _count_usage(steps, usage)
        episodes.append(EpisodeEvidence(
            episode=header["episode"], path=str(path), seed=header["seed"], steps=len(steps),
            progression=end["progression"], gains=_gains(steps), context=context_growth(steps),
        ))
    ordered = dict(sorted(usage.items()))
    return Evidence(
        episodes=episodes, failure_points=points, files=ordered,
        never_read=[name for name, u in ordered.items() if not u.reads],
        never_written=[name for name, u in ordered.items() if not u.writes],
    )


def episode_failures(episode: str, steps: list[dict]) -> list[FailurePoint]:
    """Every failure point of one episode's step records, ordered by first step."""
    points = [point for record in steps for point in _step_failures(episode, record)]
    actions = [record["action"] for record in steps]
    fingerprints = [progress_fingerprint(record["state"]) for record in steps]
    stuck = [i > 0 and fingerprints[i] == fingerprints[i - 1] for i in range(len(steps))]
    for first, last in _runs(stuck):
        run = last - first + 1
        detail = f"position, inventory and level unchanged for {run} step(s); actions {tally(actions[first:last + 1])}"
        points.append(FailurePoint(episode, first, last, "stuck", detail))
    reversals = [i > 0 and is_reversal(actions[i - 1], actions[i]) for i in range(len(steps))]
    for first, last in _runs(reversals):
        detail = f"{last - first + 1} direction reversal(s) in a row; actions {tally(actions[first - 1:last + 1])}"
        points.append(FailurePoint(episode, first - 1, last, "oscillation", detail))
    return sorted(points, key=lambda p: p.step_start)


def context_growth(steps: list[dict]) -> ContextGrowth:
    """How the prompt grows over an episode: a rising slope is what log pruning is for."""
    tokens = [sum(turn["input_tokens"] for turn in record["turns"]) for record in steps]
    if not tokens:
        return ContextGrowth(0.0, 0.0, 0.0)
    slope = statistics.linear_regression(list(range(len(tokens))), tokens).slope if len(tokens) > 1 else 0.0
    return ContextGrowth(
        start_tokens_per_step=statistics.fmean(tokens[:CONTEXT_WINDOW]),
        end_tokens_per_step=statistics.fmean(tokens[-CONTEXT_WINDOW:]),
        slope=slope,
    )


def recorded_op(text: str) -> Op | None:
    """The operation a trajectory's op text records (written by ``format_op``, so it parses back)."""
    ops = parse_ops(text).ops
    return ops[0] if ops else None


def tally(items: Iterable[str], limit: int = 5) -> str:
    """``east x12, west x11 (+3 others x5)``: the ``limit`` most common first, ties in first-seen order."""
    counts = Counter(items).most_common()
    text = ", ".join(f"{item} x{n}" for item, n in counts[:limit])
    rest = counts[limit:]
    return text + (f" (+{len(rest)} others x{sum(n for _, n in rest)})" if rest else "")


def evidence_digest(evidence: dict) -> str:
    """The evidence as a few readable lines: failure kinds, file usage, context growth."""
    points = evidence["failure_points"]
    lines = [f"- failure points: {len(points)} ({tally(p['kind'] for p in points) or 'none'})"]
    for name, usage in evidence["files"].items():
        lines.append(f"- file `{name}`: {usage['reads']} reads, {usage['writes']} writes "
                     f"({usage['redundant_writes']} redundant), {usage['refused']} refused")
    if evidence["never_read"]:
        lines.append(f"- never read: {', '.join(evidence['never_read'])}")
    if evidence["never_written"]:
        lines.append(f"- never written: {', '.join(evidence['never_written'])}")
    for e in evidence["episodes"]:
        c = e["context"]
        lines.append(f"- {e['episode']}: {e['steps']} steps, progression {100 * e['progression']:.1f}%, input tokens/step "
                     f"{c['start_tokens_per_step']:.0f} -> {c['end_tokens_per_step']:.0f}")
    return "\n".join(lines)


def _step_failures(episode: str, record: dict) -> list[FailurePoint]:
    """The single-step failures of one record: its action, and each turn's errors and operations."""
    step, points = record["step"], []
    if not record["action_valid"]:
        said = record["turns"][-1]["text"] if record["turns"] else ""
        detail = f"no valid action in {quote(said)}; played the default {record['action']!r}"
        points.append(FailurePoint(episode, step, step, "invalid_action", detail))
    for turn in record["turns"]:
        if turn["errors"]:
            more = f" (+{len(turn['errors']) - 1} more)" if len(turn["errors"]) > 1 else ""
            points.append(FailurePoint(episode, step, step, "malformed_turn", f"{turn['phase']} turn: {turn['errors'][0]}{more}"))
        for op in turn["ops"]:
            kind = _op_failure(op)
            if kind is not None:
                detail = f"{turn['phase']}: {quote(op['op'])} -> {quote(op['result'])}"
                points.append(FailurePoint(episode, step, step, kind, detail))
    return points


def _op_failure(op: dict) -> FailureKind | None:
    if not op["ok"]:
        return "refused_op"
    if op["redundant"] and op["op"].startswith(WRITE_TOKENS):
        return "redundant_write"
    if op["empty"] and op["op"].startswith(SEARCH_TOKENS):
        return "empty_search"
    return None


def _runs(flags: list[bool]) -> list[tuple[int, int]]:
    """(first, last) index of each maximal run of True: consecutive flagged steps are one stretch."""
    runs = []
    for flagged, group in groupby(range(len(flags)), key=flags.__getitem__):
        if flagged:
            indices = list(group)
            runs.append((indices[0], indices[-1]))
    return runs


def _count_usage(steps: list[dict], usage: dict[str, FileUsage]) -> None:
    for record in steps:
        for turn in record["turns"]:
            for op in turn["ops"]:
                parsed = recorded_op(op["op"])
                if parsed is None or parsed.file is None:
                    continue
                counts = usage.setdefault(parsed.file, FileUsage())
                if not op["ok"]:
                    counts.refused += 1
                elif op["op"].startswith(WRITE_TOKENS):
                    counts.writes += 1
                    counts.redundant_writes += op["redundant"]
                elif parsed.name in READ_OPS:
                    counts.reads += 1


def _gains(steps: list[dict]) -> list[ProgressionGain]:
    gains, best = [], 0.0
    for record in steps:
        if record["progression"] > best:
            best = record["progression"]
            gains.append(ProgressionGain(record["step"], best))
    return gains
