"""Curation's caps on the decisions it keeps: no exact duplicates, no completion repeated more than
``max_repeats`` times (a dataset of a thousand ``<|DONE|>`` teaches nothing), and no episode over
``episode_balance`` times its fair share; the largest measured effects are kept first. Each cap
returns the decisions it keeps and the new fate of those it takes out (``meta/fate.py``)."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict

from automem_dagster.meta.calibration import effect_of
from automem_dagster.meta.decisions import MemoryDecision
from automem_dagster.meta.fate import Fate, Fated


def dedupe(kept: list[MemoryDecision], max_repeats: int) -> tuple[list[MemoryDecision], dict[str, Fated]]:
    """Take out decisions whose examples all repeat already-kept ones exactly, and cap identical
    completions at ``max_repeats`` (the largest measured effects kept)."""
    seen: set[str] = set()
    repeats: Counter[str] = Counter()
    out, dropped = [], {}
    for d in sorted(kept, key=measured_first):
        keys = [_example_key(e) for e in d.examples]
        completion = "\n".join(e["completion"][0]["content"] for e in d.examples)
        if all(k in seen for k in keys):
            dropped[d.id] = Fated(Fate.DUPLICATE, "its examples repeat kept examples exactly")
        elif repeats[completion] >= max_repeats:
            dropped[d.id] = Fated(Fate.DUPLICATE, f"this completion is already kept {max_repeats} times")
        else:
            seen.update(keys)
            repeats[completion] += 1
            out.append(d)
    return out, dropped


def balance(kept: list[MemoryDecision], share: float) -> tuple[list[MemoryDecision], dict[str, Fated]]:
    """Keep at most ``share`` times the mean number of decisions per episode from each episode (at least
    one), the largest measured effects first; the kept ones in episode, step and phase order."""
    by_episode: dict[str, list[MemoryDecision]] = defaultdict(list)
    for d in kept:
        by_episode[d.episode].append(d)
    if not by_episode:
        return [], {}
    cap = max(1, math.ceil(share * len(kept) / len(by_episode)))
    out, dropped = [], {}
    for episode_decisions in by_episode.values():
        for rank, d in enumerate(sorted(episode_decisions, key=measured_first)):
            if rank < cap:
                out.append(d)
            else:
                dropped[d.id] = Fated(Fate.BALANCED_OUT, f"episode already contributes {cap} decisions")
    return sorted(out, key=lambda d: (d.episode, d.step, d.phase)), dropped


def measured_first(d: MemoryDecision) -> tuple:
    """The order dedupe and balance keep decisions in: measured before unmeasured, largest effect first."""
    return (d.replayed is None, -effect_of(d)[0], d.episode, d.step, d.phase)


def _example_key(example: dict) -> str:
    return hashlib.sha256(json.dumps([example["prompt"], example["completion"]], sort_keys=True).encode()).hexdigest()
