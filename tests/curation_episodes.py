"""Constructed Crafter steps and episodes whose memory decisions exercise every scoring rule of
curation (no model), and the curation settings the tests score them with."""

from __future__ import annotations

import builders
from builders import turn

from automem_dagster.meta.curate import CurationSettings
from automem_dagster.meta.decisions import ScoreWeights
from automem_dagster.rollout.trajectory import TrajectoryWriter, episode_id, trajectory_path
from automem_dagster.scaffold import content_hash, load_scaffold

SCAFFOLD = load_scaffold("crafter", 0)


INDEX = "actions_log.txt (0 lines)\nmap_notes.txt (0 lines)"


def op(text, result, ok=True, redundant=False, empty=False, changed=False):
    return {"op": text, "ok": ok, "result": result, "redundant": redundant, "empty": empty, "changed": changed}


def step(action, reward, progression, turns, warnings=()):
    return builders.step(action, turns, reward=reward, progression=progression, warnings=warnings,
                         memory_index={"log": INDEX, "plan": INDEX})


def constructed_steps():
    """Five steps whose decisions exercise every scoring rule (K = 2)."""
    return [
        step("move_left", 0.0, 0.0, [
            turn("plan", "<|READ|>strategy.txt", [op("<|READ|>strategy.txt", "strategy.txt (1 lines):\nCollect wood")]),
            turn("plan", "<|ACTION|>move_left<|END|>"),
        ]),
        step("do", 1.0, 1 / 22, [
            turn("log", "<|APPEND|>map_notes.txt|tree west of start\n<|DONE|>",
                 [op("<|APPEND|>map_notes.txt|tree west of start", "appended", changed=True)]),
            turn("plan", "<|SEARCH|>map_notes.txt|tree",
                 [op("<|SEARCH|>map_notes.txt|tree", "1 lines in map_notes.txt contain 'tree':\ntree west of start")]),
            turn("plan", "<|ACTION|>do<|END|>"),
        ]),
        step("noop", 0.0, 1 / 22, [
            turn("log", "<|APPEND|>actions_log.txt|did do\n<|DONE|>",
                 [op("<|APPEND|>actions_log.txt|did do", "appended", changed=True)]),
            turn("plan", "<|SEARCH|>survival_log.txt|zombie",
                 [op("<|SEARCH|>survival_log.txt|zombie", "no line in survival_log.txt contains 'zombie'", empty=True)]),
            turn("plan", "<|ACTION|>noop<|END|>"),
        ]),
        step("noop", 0.0, 1 / 22, [
            turn("log", "<|APPEND|>map_notes.txt|tree west of start\n<|DONE|>",
                 [op("<|APPEND|>map_notes.txt|tree west of start", "already there", redundant=True)]),
            turn("plan", "<|ACTION|>noop<|END|>"),
        ]),
        step("noop", 0.0, 1 / 22, [
            turn("log", "<|BOGUS|>x", errors=["unknown operation 'BOGUS'"]),
            turn("plan", "<|ACTION|>noop<|END|>"),
        ]),
    ]


def write_episode(batch, seed, steps=None, scaffold=SCAFFOLD, agent="memory"):
    eid = episode_id("crafter", seed)
    writer = TrajectoryWriter(trajectory_path(batch, eid), {
        "episode": eid, "game": "crafter", "seed": seed, "max_steps": 5, "agent": agent,
        "scaffold": {"game": scaffold.game, "version": scaffold.version, "hash": content_hash(scaffold)},
    })
    for t, record in enumerate(steps or constructed_steps()):
        writer.step({"step": t, **record})
    return writer.finish({"steps": 5, "progression": 1 / 22, "total_reward": 1.0, "done": False})


def settings(**overrides):
    """Settings that score with a window of 2 and, since these tests replay nothing (no endpoints), keep the
    unmeasured decisions by the cheap score (``keep_unmeasured``), which is what they check."""
    return CurationSettings(**{"weights": ScoreWeights(horizon=2), "min_examples": 1, "keep_unmeasured": True,
                               **overrides})
