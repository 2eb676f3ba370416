"""Render a rollout batch as text for the meta-LLM, within a token budget.

The meta-LLM diagnoses from complete trajectories, but a batch of long episodes does not fit
in any context. When the full step-by-step text fits, it is sent as is. When it does not, the
batch is compressed, never cut off: every episode keeps its header, the steps around each
failure point (``evidence.FailurePoint``) stay verbatim, and the spans between them become one
summary line each (actions, progression, reward, memory operations, failure points counted).
``COMPRESSED:`` lines at the top say what was compressed and how, so the meta-LLM knows what it
is not seeing. To fit, the excerpt window shrinks first, then excerpts are dropped (kinds and
episodes taking turns, so every kind of failure keeps an example as long as possible), then
whole episodes; the result is always within the budget or a ``ValueError`` says why not.

Tokens are counted by a ``TokenCounter`` (``llm/tokens.py``): exactly by the meta endpoint's
server where it has a tokenize route (llama.cpp, vLLM), else as characters / 4, which undercounts
ASCII maps, so such a budget needs a margin below the context. The search over layouts renders
dozens of candidates, so with an exact counter it does not count each one on the server: it
estimates with a characters-per-token ratio calibrated on one exact count of the full text, then
counts the layout it chose exactly. Summary lines tokenize differently from steps, so the ratio is
then calibrated again on that layout and the search repeated: if the first layout was over the
budget, to find one that fits; if it fitted, to find whether a more detailed one fits too (a
ratio from the full text can overstate a compressed layout's tokens). As a last resort the
search counts every candidate exactly. The result is within the budget
by the counter's own count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, groupby, zip_longest
from pathlib import Path
from typing import TypeVar

from automem_dagster.llm.tokens import TokenCounter, estimate_tokens
from automem_dagster.meta.evidence import FAILURE_KINDS, Evidence, FailurePoint, recorded_op, tally
from automem_dagster.rollout.trajectory import read_trajectory

CALIBRATIONS = 3
"""Searches with a calibrated ratio before every candidate is counted exactly (see the module docstring)."""
DEFAULT_WINDOW = 3
"""Steps shown verbatim on either side of a failure point (of each end of a stretch)."""

NOTE_PREFIX = "COMPRESSED: "

_T = TypeVar("_T")


@dataclass(frozen=True)
class RenderedBatch:
    """The text for the meta-LLM; ``omitted_steps`` were not shown verbatim, ``notes`` say how."""

    text: str
    compressed: bool
    omitted_steps: int
    notes: list[str]
    tokens: int = 0
    """The text's tokens by the counter it was fitted with."""
    shown: dict[str, frozenset[int]] | None = None
    """Per episode, the steps the text shows: verbatim, or named as the end of a failure stretch on a
    verbatim step's ``!!`` line; None when every step is verbatim (nothing was compressed)."""

    def was_shown(self, episode: str, step: int) -> bool:
        """Whether ``step`` of ``episode`` is in the text, not summarised away or omitted."""
        return self.shown is None or step in self.shown.get(episode, ())


def render_step(record: dict, points: Sequence[FailurePoint] = ()) -> str:
    """One step verbatim: observation, warnings, every turn's operations with their results,
    errors (with the reply that caused them), the action, and a ``!!`` line per failure point
    that starts at this step so the meta-LLM can tie the evidence to what it reads."""
    lines = [f"--- step {record['step']}", "observation:", _indent(record["observation"], "  ")]
    lines += [f"warning shown: {warning}" for warning in record["warnings"]]
    for turn in record["turns"]:
        lines += _turn_lines(turn)
    validity = "" if record["action_valid"] else " (no valid action in the output; the default was played)"
    lines.append(f"action: {record['action']}{validity}; reward {record['reward']:g}, progression {record['progression']:g}")
    lines += [f"!! {p.kind} {_steps(p.step_start, p.step_end)}: {p.detail}" for p in points]
    return "\n".join(lines)


def render_for_diagnosis(
    trajectory_paths: Iterable[Path], evidence: Evidence, budget_tokens: int, window: int = DEFAULT_WINDOW,
    counter: TokenCounter | None = None,
) -> RenderedBatch:
    """The batch as text of at most ``budget_tokens`` tokens by ``counter`` (default chars/4),
    compressed only if needed."""
    if window < 0:
        raise ValueError(f"window must be 0 or more steps, got {window}")
    counter = counter or TokenCounter.estimate()
    episodes = [_Episode.load(Path(path), evidence.failure_points) for path in trajectory_paths]
    full = _batch_text(episodes, [[True] * len(e.steps) for e in episodes], [])
    full_tokens = counter.count(full)
    if full_tokens <= budget_tokens:
        return RenderedBatch(full, compressed=False, omitted_steps=0, notes=[], tokens=full_tokens)
    if not counter.exact:
        return _Compressor(episodes, full_tokens, budget_tokens, window, estimate_tokens, counter.method).fit()
    chars_per_token = len(full) / full_tokens
    best: RenderedBatch | None = None
    for _ in range(CALIBRATIONS):
        calibrated = _Compressor(episodes, full_tokens, budget_tokens, window,
                                 lambda text, ratio=chars_per_token: math.ceil(len(text) / ratio), counter.method)
        try:
            rendered = calibrated.fit()
        except ValueError:
            break
        if best is not None and len(rendered.text) <= len(best.text):
            return best  # recalibrating on the fitting layout found nothing more detailed
        tokens = counter.count(rendered.text)
        if not counter.exact:  # the server stopped counting: the chars/4 search decides
            return _Compressor(episodes, full_tokens, budget_tokens, window, estimate_tokens, counter.method).fit()
        if tokens <= budget_tokens:
            best = replace(rendered, tokens=tokens)
        elif best is not None:
            return best
        chars_per_token = len(rendered.text) / tokens
    if best is not None:
        return best
    return _Compressor(episodes, full_tokens, budget_tokens, window, counter.count, counter.method).fit()


@dataclass(frozen=True)
class _Episode:
    """One trajectory with its failure points and its steps rendered once, reused by every layout."""

    header: dict
    steps: list[dict]
    end: dict
    points: list[FailurePoint]
    starting: list[list[FailurePoint]]
    """Per step, the failure points that start there."""
    carried: list[list[str]]
    """Per step, the kinds of the stretches that started earlier and still run there."""
    blocks: list[str]
    op_names: list[list[str]]

    @classmethod
    def load(cls, path: Path, all_points: list[FailurePoint]) -> _Episode:
        header, steps, end = read_trajectory(path)
        points = [p for p in all_points if p.episode == header["episode"]]
        starting: list[list[FailurePoint]] = [[] for _ in steps]
        carried: list[list[str]] = [[] for _ in steps]
        for point in points:
            if not 0 <= point.step_start <= point.step_end < len(steps):
                raise ValueError(f"the evidence does not match {path}: it has a failure point at steps "
                                 f"{point.step_start}-{point.step_end} of {len(steps)}; collect the evidence from the same files")
            starting[point.step_start].append(point)
            for i in range(point.step_start + 1, point.step_end + 1):
                carried[i].append(point.kind)
        blocks = [render_step(record, starting[i]) for i, record in enumerate(steps)]
        op_names = [[_op_name(op["op"]) for turn in record["turns"] for op in turn["ops"]] for record in steps]
        return cls(header, steps, end, points, starting, carried, blocks, op_names)

    def title(self) -> str:
        return (f"## episode {self.header['episode']}: seed {self.header['seed']}, {len(self.steps)} steps, "
                f"final progression {self.end['progression']:g}, total reward {self.end['total_reward']:g}")

    def text(self, verbatim: list[bool]) -> str:
        """Steps marked verbatim as they are, each run of the others as one summary line."""
        parts = [self.title()]
        for shown, run in groupby(range(len(self.steps)), key=verbatim.__getitem__):
            indices = list(run)
            parts += [self.blocks[i] for i in indices] if shown else [self.span_summary(indices[0], indices[-1])]
        return "\n".join(parts)

    def span_summary(self, first: int, last: int) -> str:
        records = self.steps[first:last + 1]
        before = self.steps[first - 1]["progression"] if first else 0.0
        parts = [
            f"actions {tally(r['action'] for r in records)}",
            f"progression {before:g}->{records[-1]['progression']:g}",
            f"reward {sum(r['reward'] for r in records):g}",
        ]
        ops = list(chain.from_iterable(self.op_names[first:last + 1]))
        if ops:
            parts.append(f"memory ops {tally(ops)}")
        kinds = self.carried[first] + [p.kind for points in self.starting[first:last + 1] for p in points]
        if kinds:
            parts.append(f"failure points {tally(kinds, limit=len(FAILURE_KINDS))}")
        return f"~~ {_steps(first, last)} summarised: " + "; ".join(parts)

    def shown_steps(self, verbatim: list[bool]) -> frozenset[int]:
        """The steps ``text(verbatim)`` shows: the verbatim ones and the ends its ``!!`` lines name."""
        steps = {i for i, shown in enumerate(verbatim) if shown}
        return frozenset(steps | {p.step_end for i in steps for p in self.starting[i]})

    def excerpt_mask(self, points: Iterable[FailurePoint], window: int) -> list[bool]:
        """Which steps to show verbatim: ``window`` steps around each end of each point."""
        mask = [False] * len(self.steps)
        for point in points:
            for centre in {point.step_start, point.step_end}:
                for i in range(max(0, centre - window), min(len(mask), centre + window + 1)):
                    mask[i] = True
        return mask


@dataclass
class _Compressor:
    """Finds the most detailed compressed layout that fits: window, then excerpts, then episodes."""

    episodes: list[_Episode]
    full_tokens: int
    budget: int
    window: int
    measure: Callable[[str], int]
    method: str
    priority: list[FailurePoint] = field(init=False)
    """The failure points in the order excerpts keep them: one of each kind in turn, each kind's taken from the
    episodes in turn, so no kind or episode crowds out the others."""

    def __post_init__(self) -> None:
        self.priority = _interleave([
            _interleave([[p for p in e.points if p.kind == kind] for e in self.episodes]) for kind in FAILURE_KINDS
        ])

    def fit(self) -> RenderedBatch:
        """The chosen layout with its token count by ``measure``."""
        rendered = self._search()
        return replace(rendered, tokens=self.measure(rendered.text))

    def _search(self) -> RenderedBatch:
        every, total = len(self.priority), len(self.episodes)
        for window in range(self.window, -1, -1) if every else [0]:
            rendered = self.render(window, every, total)
            if self.fits(rendered):
                return rendered
        rendered = (self._largest(every - 1, lambda m: self.render(0, m, total))
                    or self._largest(total - 1, lambda kept: self.render(0, 0, kept)))
        if rendered is None:
            needed = self.measure(self.render(0, 0, 0).text)
            raise ValueError(f"budget_tokens={self.budget} is too small even to say what was compressed "
                             f"(that takes ~{needed} tokens); raise the budget")
        return rendered

    def fits(self, rendered: RenderedBatch) -> bool:
        return self.measure(rendered.text) <= self.budget

    def render(self, window: int, excerpts: int, kept: int) -> RenderedBatch:
        """The batch with the first ``excerpts`` failure points by priority and the first ``kept`` episodes."""
        chosen: dict[str, list[FailurePoint]] = {}
        for point in self.priority[:excerpts]:
            chosen.setdefault(point.episode, []).append(point)
        masks = [e.excerpt_mask(chosen.get(e.header["episode"], []), window) for e in self.episodes[:kept]]
        steps = sum(len(e.steps) for e in self.episodes)
        omitted = steps - sum(map(sum, masks))
        notes = self._notes(window, excerpts, kept, omitted, steps)
        shown = {e.header["episode"]: e.shown_steps(mask) for e, mask in zip(self.episodes, masks, strict=False)}
        return RenderedBatch(_batch_text(self.episodes, masks, notes), True, omitted, notes, shown=shown)

    def _notes(self, window: int, excerpts: int, kept: int, omitted: int, steps: int) -> list[str]:
        every, total = len(self.priority), len(self.episodes)
        approx = "~" if self.method == "chars/4" else ""
        notes = [f"the full step-by-step text needs {approx}{self.full_tokens} tokens ({self.method}), over the budget "
                 f"of {self.budget}; "
                 f"{omitted} of {steps} steps are summarised in spans ('~~' lines) or omitted instead of shown verbatim"]
        if not every:
            notes.append("the batch has no failure points, so every episode is summarised in spans")
        elif excerpts:
            shrunk = f", shrunk from {self.window} to fit" if window < self.window else ""
            notes.append(f"verbatim excerpts: {window} step(s) either side of each failure point, "
                         f"at both ends of a stretch{shrunk}")
        if excerpts and excerpts < every:
            notes.append(f"excerpts for {excerpts} of {every} failure points, chosen round-robin over kinds and episodes; "
                         f"the other {every - excerpts} are only counted in the span summaries")
        elif every and not excerpts:
            notes.append(f"no verbatim excerpts fit: all {every} failure points are only counted in the span summaries")
        if kept < total:
            notes.append(f"only the first {kept} of {total} episodes are summarised; the other {total - kept} are omitted")
        return notes

    def _largest(self, most: int, build: Callable[[int], RenderedBatch]) -> RenderedBatch | None:
        """``build(i)`` for the largest i in 0..most that fits, by bisection (text grows with i)."""
        best, low, high = None, 0, most
        while low <= high:
            middle = (low + high) // 2
            rendered = build(middle)
            if self.fits(rendered):
                best, low = rendered, middle + 1
            else:
                high = middle - 1
        return best


def _batch_text(episodes: list[_Episode], masks: list[list[bool]], notes: list[str]) -> str:
    """The whole text: the batch's title, the notes, then the first ``len(masks)`` episodes (the rest omitted)."""
    title = f"# Rollout batch: {len(episodes)} episodes, {sum(len(e.steps) for e in episodes)} steps"
    head = "\n".join([title, *(NOTE_PREFIX + note for note in notes)])
    return "\n\n".join([head, *(e.text(mask) for e, mask in zip(episodes, masks, strict=False))])


def _turn_lines(turn: dict) -> list[str]:
    lines = [f"{turn['phase']} turn ({turn['endpoint']} model, {turn['input_tokens']} input tokens):"]
    for op in turn["ops"]:
        flags = "".join(f"[{flag}] " for flag, on in
                        (("refused", not op["ok"]), ("redundant", op["redundant"]), ("empty", op["empty"])) if on)
        lines.append(_indent(f"{op['op']} -> {flags}{op['result']}", "  ", "    "))
    lines += [f"  error: {error}" for error in turn["errors"]]
    if turn["errors"]:
        lines.append(_indent(f"reply: {turn['text']}", "  ", "    "))
    return lines


def _indent(text: str, first: str, rest: str | None = None) -> str:
    """Indent every line of ``text`` (``rest`` after the first), so multi-line results stay readable."""
    later = first if rest is None else rest
    return "\n".join((first if i == 0 else later) + line for i, line in enumerate(text.splitlines() or [""]))


def _op_name(text: str) -> str:
    op = recorded_op(text)
    return op.name.value if op is not None else "unrecognised"


def ranges(steps: Iterable[int]) -> str:
    """``{1, 2, 3, 7}`` as ``1-3, 7``."""
    out, ordered = [], sorted(steps)
    start = prev = None
    for step in ordered:
        if start is None:
            start = prev = step
        elif step == prev + 1:
            prev = step
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = step
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(out)


def _steps(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _interleave(groups: list[list[_T]]) -> list[_T]:
    """Round-robin over groups: one from each in turn, so no group crowds out the others."""
    return [item for row in zip_longest(*groups) for item in row if item is not None]
