"""The rules meta's rules on the memory routine: when the model is asked for memory decisions, and
whether a LOG turn may end without one (``meta/rules_reviser.py`` applies them with the others).

- memory written or read on few steps while the routine held LOG or the consultation back:
  LOG runs more often, or consultations stop being reused;
- a LOG that ran on most steps and wrote (nearly) nothing: a LOG turn must write at least once
  (``limits.log_min_writes``). The embedded 135M model ends almost every LOG turn with ``<|DONE|>``
  at once (issue 53: no note in a whole key-and-door batch), so no memory decision could matter.
- its read-side twin, consultations that mostly end unread while memory has content: a consultation
  must read at least once (``limits.plan_min_reads``). Made to write, the embedded model still read
  its notes at key and door's junction in 5 of 30 episodes, so the actor decided on memory it was
  not shown and no note could change the outcome.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from automem_dagster.memory.ops import OpName
from automem_dagster.meta.rule_finding import RuleFinding, end_of_first
from automem_dagster.rollout.trajectory import read_trajectory
from automem_dagster.scaffold.model import Scaffold

SPARSE_MIN_STEPS = 10
"""Steps in the batch before the routine is judged on its reads and writes per step."""
SPARSE_PER_STEP = 0.25
"""Reads (or writes) per step below which memory counts as sparsely used..."""
ROUTINE_HELD_SHARE = 0.5
"""...and the share of steps without a LOG (or with a reused consultation) at or above which the
routine, rather than the model's choice in its turns, is what held them back."""
SILENT_SHARE = 0.1
"""Writes per LOG turn below which a LOG that ran on most steps counts as silent."""
UNREAD_SHARE = 0.5
"""Share of the consultations offered (a memory file had content) that read something, below which the
consultations count as mostly unread."""
_HAS_LINES = re.compile(r"\((?!0 lines)\d+ lines\)")
"""A file with content in a step's ``memory_index`` (``MemoryStore.index``: ``name (N lines)``)."""
_WRITES = (OpName.APPEND, OpName.WRITE, OpName.UPSERT)
ROUTINE_COUNTS = ("steps", "log_steps", "reused_consultations", "consultations_offered", "consultations_read")
"""The counts ``routine_outcomes`` gives the evidence, every one present (0 where nothing was counted)."""


def routine_outcomes(paths: list[Path]) -> dict[str, int]:
    """What the memory routine let happen: the steps, those with a LOG turn, those that showed a reused
    consultation instead of consulting (``agent/savings.py``), the consultations offered while a memory
    file had content, and how many of those read something."""
    counts = Counter()
    for path in paths:
        _, steps, _ = read_trajectory(path)
        for record in steps:
            counts["steps"] += 1
            counts["log_steps"] += any(t["phase"] == "log" for t in record["turns"])
            counts["reused_consultations"] += "reused_consultation" in (record.get("memory_context") or {})
            plans = [t for t in record["turns"] if t["phase"] == "plan"]
            if plans and _HAS_LINES.search((record.get("memory_index") or {}).get("plan", "")):
                counts["consultations_offered"] += 1
                counts["consultations_read"] += any(t["ops"] for t in plans)
    return {key: counts[key] for key in ROUTINE_COUNTS}


def rule_sparse_memory(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Revise the routine when memory was written or read on few steps and the routine held it back:
    few writes while most steps ran no LOG halve ``log_every``; few reads while most steps reused a
    consultation switch ``reuse_consultation`` off. Silent without the ``routine`` counts (a meta-LLM's
    diagnosis) or on a batch shorter than ``SPARSE_MIN_STEPS``."""
    counts, routine = evidence.get("routine"), scaffold.routine
    if not counts or counts["steps"] < SPARSE_MIN_STEPS:
        return []
    steps = counts["steps"]
    writes = sum(u["writes"] for u in evidence["files"].values())
    reads = sum(u["reads"] for u in evidence["files"].values())
    changes, causes = {}, []
    if (writes < SPARSE_PER_STEP * steps and routine.log_every > 1 and scaffold.limits.log_max_ops > 0
            and steps - counts["log_steps"] >= ROUTINE_HELD_SHARE * steps):
        changes["log_every"] = max(1, routine.log_every // 2)
        causes.append(f"LOG runs at most every {routine.log_every} steps unless {routine.log_triggers} happen")
    if (reads < SPARSE_PER_STEP * steps and routine.reuse_consultation and scaffold.limits.plan_max_ops > 0
            and counts["reused_consultations"] >= ROUTINE_HELD_SHARE * steps):
        changes["reuse_consultation"] = False
        causes.append("a consultation is reused while the files are unchanged")
    if not changes:
        return []
    episode, step = end_of_first(evidence)
    return [RuleFinding(
        "other", episode, step,
        f"evidence routine: {writes} writes, {reads} reads in {steps} steps; LOG ran at {counts['log_steps']} "
        f"steps, {counts['reused_consultations']} reused a consultation",
        "the routine asks for few memory decisions: " + "; ".join(causes),
        "routine " + ", ".join(f"{k} {v}" for k, v in changes.items()), {"routine": changes})]


def rule_silent_log(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Make a LOG turn write at least once (``limits.log_min_writes`` 1) when LOG ran on most steps and
    wrote on almost none of them (below ``SILENT_SHARE`` writes per LOG turn): the routine asked, the
    model always declined. Silent without the ``routine`` counts, on a short batch, without a write
    operation, or where a LOG turn must write already."""
    counts, limits = evidence.get("routine"), scaffold.limits
    if (not counts or counts["steps"] < SPARSE_MIN_STEPS or limits.log_min_writes > 0 or limits.log_max_ops == 0
            or not any(op in scaffold.operations for op in _WRITES)):
        return []
    logs = counts["log_steps"]
    writes = sum(u["writes"] for u in evidence["files"].values())
    if logs < ROUTINE_HELD_SHARE * counts["steps"] or writes >= SILENT_SHARE * logs:
        return []
    return _at_least_once(evidence, "log_min_writes",
                          f"evidence routine: LOG ran at {logs} of {counts['steps']} steps and made {writes} writes",
                          "a LOG turn may end with <|DONE|> at once, and the model always ended it so: nothing is "
                          "ever noted")


def rule_unread_consultation(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Make a consultation read at least once (``limits.plan_min_reads`` 1) when consultations were offered
    on most steps with memory holding something and read on fewer than ``UNREAD_SHARE`` of them: what
    was noted was rarely shown to the acting model. Silent without the counts (a meta-LLM's diagnosis, or
    trajectories recorded before ``memory_index``), on a short batch, or where a consultation must read
    already or may not read at all."""
    counts, limits = evidence.get("routine"), scaffold.limits
    if (not counts or counts["steps"] < SPARSE_MIN_STEPS or limits.plan_min_reads > 0 or limits.plan_max_ops == 0
            or not counts.get("consultations_offered")):
        return []
    offered, read = counts["consultations_offered"], counts["consultations_read"]
    if offered < ROUTINE_HELD_SHARE * counts["steps"] or read >= UNREAD_SHARE * offered:
        return []
    return _at_least_once(evidence, "plan_min_reads",
                          f"evidence routine: {offered} consultations offered with memory holding something, {read} "
                          "read it", "a consultation may end with nothing read, and mostly did: the actor decided "
                          "without the notes")


def _at_least_once(evidence: dict, limit: str, what_happened: str, cause: str) -> list[RuleFinding]:
    """The finding that sets one of the routine's least-number limits to 1, at the end of the first episode."""
    episode, step = end_of_first(evidence)
    return [RuleFinding("other", episode, step, what_happened, cause, f"limits {limit} 1", {"limits": {limit: 1}})]
