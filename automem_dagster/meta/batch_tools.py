"""Read-only tools over a rollout batch, for a meta-LLM that reads the steps it needs.

In the one-call mode the meta-LLM gets the batch compressed to its context (``compress.py``);
in the tool-using mode (``meta_mode: tools``, ``meta/tool_session.py``) it asks for what it
wants instead: the episodes with their outcomes and failure points, a range of steps verbatim,
a search over steps, a memory file as it stood at a step, the computed evidence, the scaffold
and its diff to the parent. Each tool has an OpenAI function schema (``schemas``), only reads,
and returns text of at most ``max_chars`` characters that says when and where it was cut.

Every result also says which steps it put in front of the model: ``read`` (shown verbatim,
by ``read_steps``) and ``shown`` (named with what happened there: failure points, search hits),
so the diagnosis can refuse a finding that cites a step the model never saw.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from automem_dagster.meta.compress import render_step
from automem_dagster.meta.evidence import Evidence, FailurePoint, collect_evidence, evidence_digest, tally
from automem_dagster.meta.memory_replay import ReplayError, file_at_step, journal_path
from automem_dagster.rollout.trajectory import read_trajectory
from automem_dagster.scaffold.io import diff_scaffolds, scaffold_yaml
from automem_dagster.scaffold.model import Scaffold

MAX_RESULT_CHARS = 12_000
"""Characters one tool result may take (about 3-6k tokens): a 1,000-step episode never arrives whole."""
MAX_STEPS_PER_READ = 60
MAX_SEARCH_HITS = 40
MAX_POINTS_LISTED = 8
"""Failure points listed per episode by ``list_episodes`` (the rest counted by kind)."""


@dataclass
class ToolResult:
    """What a tool returned, and which steps (per episode) it showed verbatim or named."""

    text: str
    cut: bool = False
    read: dict[str, set[int]] = field(default_factory=dict)
    shown: dict[str, set[int]] = field(default_factory=dict)
    error: bool = False


class ToolArgumentError(ValueError):
    """Arguments a tool cannot use; the message goes back to the model so it can call again."""


def _fn(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


_EPISODE = {"type": "string", "description": "an episode name as list_episodes gives it"}
_STEP = {"type": "integer", "minimum": 0}


class BatchTools:
    """The tools over the batch ``evidence`` was collected from, played with ``scaffold`` (``parent`` is
    the scaffold it was revised from)."""

    def __init__(self, evidence: Evidence, scaffold: Scaffold, parent: Scaffold | None = None,
                 max_chars: int = MAX_RESULT_CHARS):
        self.paths = {e.episode: Path(e.path) for e in evidence.episodes}
        self.evidence = evidence
        self.scaffold = scaffold
        self.parent = parent
        self.max_chars = max_chars
        self._episodes: dict[str, tuple[dict, list[dict], dict]] = {}
        self._points: dict[str, list[FailurePoint]] = defaultdict(list)
        for point in evidence.failure_points:
            self._points[point.episode].append(point)

    @classmethod
    def of_episodes(cls, paths: list[Path], scaffold: Scaffold, parent: Scaffold | None = None) -> BatchTools:
        """The tools over finished trajectory files, with the evidence collected from them."""
        return cls(collect_evidence(paths, [f.name for f in scaffold.files]), scaffold, parent)

    def schemas(self) -> list[dict]:
        """The tools as OpenAI ``tools`` entries (function calling)."""
        names = list(self.paths)
        episode = {**_EPISODE, "enum": names}
        return [
            _fn("list_episodes", "Every episode of the batch: seed, steps, progression, reward, failure points by "
                "kind and the first ones with their steps.", {}, []),
            _fn("read_steps", f"Steps first..last of one episode verbatim (at most {MAX_STEPS_PER_READ}): observation, "
                "warnings, model turns with memory operations and their results, action, reward, failure points.",
                {"episode": episode, "first": _STEP, "last": _STEP}, ["episode", "first", "last"]),
            _fn("search_steps", f"Steps whose text matches a regular expression (case-insensitive), at most "
                f"{MAX_SEARCH_HITS} hits with the matching line; optionally in one episode.",
                {"pattern": {"type": "string"}, "episode": episode}, ["pattern"]),
            _fn("read_memory", "A memory file of one episode as it stood after a step's memory operations.",
                {"episode": episode, "file": {"type": "string"}, "step": _STEP}, ["episode", "file", "step"]),
            _fn("read_evidence", "The evidence computed from the trajectories: file usage, context growth and the "
                "failure points, optionally of one kind or one episode.",
                {"kind": {"type": "string"}, "episode": episode}, []),
            _fn("read_scaffold", "The scaffold the batch was played with (YAML) and its diff to its parent.", {}, []),
        ]

    def call(self, name: str, arguments: str | dict) -> ToolResult:
        """Run tool ``name``; bad arguments and unknown tools come back as an error result, never raise."""
        handlers = {"list_episodes": self.list_episodes, "read_steps": self.read_steps,
                    "search_steps": self.search_steps, "read_memory": self.read_memory,
                    "read_evidence": self.read_evidence, "read_scaffold": self.read_scaffold}
        try:
            args = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments)
            if not isinstance(args, dict):
                raise ToolArgumentError("the arguments must be a JSON object")
            if name not in handlers:
                raise ToolArgumentError(f"no tool {name!r}; the tools are {', '.join(handlers)}")
            return handlers[name](**args)
        except json.JSONDecodeError as exc:
            return ToolResult(f"error: the arguments are not valid JSON ({exc.msg})", error=True)
        except TypeError as exc:
            return ToolResult(f"error: wrong arguments for {name} ({exc})", error=True)
        except (ToolArgumentError, ReplayError) as exc:
            return ToolResult(f"error: {exc}", error=True)

    # --- the tools -----------------------------------------------------------------------

    def list_episodes(self) -> ToolResult:
        lines = _Lines()
        for e in self.evidence.episodes:
            points = self._points[e.episode]
            _, _, end = self._episode(e.episode)
            lines.add(f"{e.episode}: seed {e.seed}, {e.steps} steps (0-{e.steps - 1}), progression {e.progression:g}, "
                         f"total reward {end['total_reward']:g}, failure points: {tally((p.kind for p in points), 7) or 'none'}")
            for p in points[:MAX_POINTS_LISTED]:
                lines.add(f"  - {p.kind} {_span(p)}: {p.detail}", e.episode, {p.step_start, p.step_end})
            if len(points) > MAX_POINTS_LISTED:
                lines.add(f"  - ... {len(points) - MAX_POINTS_LISTED} more (read_evidence with episode and kind)")
        return self._bounded(lines)

    def read_steps(self, episode: str, first: int, last: int) -> ToolResult:
        _, steps, _ = self._episode(episode)
        if not 0 <= first <= last < len(steps):
            raise ToolArgumentError(f"{episode} has steps 0-{len(steps) - 1}; got first={first}, last={last}")
        asked_last, last = last, min(last, first + MAX_STEPS_PER_READ - 1)
        starting = defaultdict(list)
        for p in self._points[episode]:
            starting[p.step_start].append(p)
        blocks, used, read = [], 0, set()
        for i in range(first, last + 1):
            block = render_step(steps[i], starting[i])
            if used + len(block) + 1 > self.max_chars - 200:
                break
            blocks.append(block)
            used += len(block) + 1
            read.add(i)
        shown_last = first + len(read) - 1
        cut = shown_last < asked_last
        if cut:
            blocks.append(f"[cut: steps {shown_last + 1}-{asked_last} not shown (at most {MAX_STEPS_PER_READ} steps and "
                          f"{self.max_chars} characters per call); call read_steps from step {shown_last + 1}]")
        return ToolResult("\n".join(blocks), cut=cut, read={episode: read} if read else {})

    def search_steps(self, pattern: str, episode: str | None = None) -> ToolResult:
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ToolArgumentError(f"pattern {pattern!r} is not a regular expression ({exc})") from exc
        names = [episode] if episode is not None else list(self.paths)
        hits, total = _Lines(), 0
        for name in names:
            _, steps, _ = self._episode(name)
            for record in steps:
                line = next((ln for ln in render_step(record).splitlines() if regex.search(ln)), None)
                if line is None:
                    continue
                total += 1
                if len(hits.rows) < MAX_SEARCH_HITS:
                    hits.add(f"{name} step {record['step']}: {line.strip()[:200]}", name, {record["step"]})
        listed = len(hits.rows)
        head = f"{total} step(s) match {pattern!r}" + (f"; the first {listed} are listed" if total > listed else "")
        hits.rows.insert(0, (head, None, set()))
        return self._bounded(hits, cut=total > listed)

    def read_memory(self, episode: str, file: str, step: int) -> ToolResult:
        _, steps, _ = self._episode(episode)
        if not 0 <= step < len(steps):
            raise ToolArgumentError(f"{episode} has steps 0-{len(steps) - 1}; got step={step}")
        journal = journal_path(self.paths[episode].parent.parent, episode)
        text = file_at_step(self.scaffold, steps, journal, file, step)
        content = text.splitlines()
        lines = _Lines()
        lines.add(f"{file} after step {step} of {episode} ({len(content)} lines):", episode, {step})
        for line in content:
            lines.add(line)
        return self._bounded(lines)

    def read_evidence(self, kind: str | None = None, episode: str | None = None) -> ToolResult:
        if episode is not None:
            self._episode(episode)
        points = [p for p in self.evidence.failure_points
                  if (kind is None or p.kind == kind) and (episode is None or p.episode == episode)]
        lines = _Lines()
        for line in [*evidence_digest(self.evidence.as_dict()).splitlines(), "", f"failure points ({len(points)}):"]:
            lines.add(line)
        for p in points:
            lines.add(f"- {p.episode} {p.kind} {_span(p)}: {p.detail}", p.episode, {p.step_start, p.step_end})
        return self._bounded(lines)

    def read_scaffold(self) -> ToolResult:
        text = f"```yaml\n{scaffold_yaml(self.scaffold)}```"
        if self.parent is not None:
            text += "\n\nDiff to its parent:\n" + diff_scaffolds(self.parent, self.scaffold)
        else:
            text += f"\n\nv{self.scaffold.version} has no parent scaffold (it is where the loop starts)."
        lines = _Lines()
        for line in text.splitlines():
            lines.add(line)
        return self._bounded(lines)

    # --- helpers -------------------------------------------------------------------------

    def _episode(self, episode: str) -> tuple[dict, list[dict], dict]:
        if episode not in self.paths:
            raise ToolArgumentError(f"no episode {episode!r}; the episodes are {', '.join(self.paths)}")
        if episode not in self._episodes:
            self._episodes[episode] = read_trajectory(self.paths[episode])
        return self._episodes[episode]

    def _bounded(self, lines: _Lines, cut: bool = False) -> ToolResult:
        """Whole lines up to ``max_chars``; a cut says how many lines were left out, and only the
        steps named on the lines kept count as shown."""
        kept, used, shown = [], 0, defaultdict(set)
        for text, episode, steps in lines.rows:
            if used + len(text) + 1 > self.max_chars - 120:
                break
            kept.append(text)
            used += len(text) + 1
            if episode is not None:
                shown[episode] |= steps
        left = len(lines.rows) - len(kept)
        text = "\n".join(kept)
        if left:
            text += f"\n[cut: {left} more line(s) over the {self.max_chars}-character limit; narrow the call]"
        return ToolResult(text, cut=cut or left > 0, shown=dict(shown))


class _Lines:
    """A tool result's lines, each with the episode and steps it names (if any)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str | None, set[int]]] = []

    def add(self, text: str, episode: str | None = None, steps: set[int] | None = None) -> None:
        self.rows.append((text, episode, set(steps or ())))


def _span(p: FailurePoint) -> str:
    return f"step {p.step_start}" if p.step_start == p.step_end else f"steps {p.step_start}-{p.step_end}"
