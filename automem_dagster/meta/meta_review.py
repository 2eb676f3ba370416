"""The meta-LLM's review of borderline decisions, an opt-in of curation (``keep_unmeasured``).

A decision whose cheap score lies between ``review_floor`` and ``accept_score`` is shown to the
meta-LLM with its situation, what it wrote and what followed, in batches, best scores first; the
reply keeps or drops each with a short reason (a ``Judgement``), and ``review_borderline`` returns
each decision's new fate (``meta/fate.py``) for ``curate`` to set. Batches beyond the budget of
calls, or without a meta endpoint, leave their decisions ``unreviewed``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from automem_dagster.datafiles import parse_json_reply
from automem_dagster.eta import eta
from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.strict_schema import to_strict
from automem_dagster.meta.decisions import MemoryDecision
from automem_dagster.meta.fate import Fate, Fated
from automem_dagster.meta.replies import Attempt, describe_reply

REVIEW_SYSTEM = """You are the meta-LLM of AutoMem. A game agent manages a file-based memory with \
operations (LOG phase: record what happened; PLAN phase: read memory before acting). You review \
its memory decisions for a training set that will teach a small model to manage memory. Keep a \
decision only if it records or consults information that helps later play: where a resource, \
exit or danger is, what worked or failed, a plan worth following. Drop noise: repeated or \
meaningless writes, reads of empty files, copying the observation verbatim, doing nothing when \
something important just happened. Reply with JSON only."""

Say = Callable[[str], None]


class Judgement(BaseModel):
    """The meta-LLM's keep or drop of one decision of a batch (``id``: its place in the batch)."""

    model_config = ConfigDict(extra="forbid")

    id: int
    keep: bool
    reason: str = Field(min_length=1, max_length=120)


class ReviewReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judgements: list[Judgement] = Field(min_length=1)


def review_schema(decisions: int) -> dict:
    """The review reply's schema for a batch of ``decisions``: one judgement per decision id."""
    schema = ReviewReply.model_json_schema()
    schema["$defs"]["Judgement"]["properties"]["id"] = {"type": "integer", "enum": list(range(decisions))}
    schema["properties"]["judgements"]["maxItems"] = decisions
    return to_strict(schema)


async def review_borderline(borderline: list[MemoryDecision], batch_size: int, max_batches: int,
                            meta: LLMClient | None, say: Say) -> tuple[list[Attempt], dict[str, Fated]]:
    """Every meta-LLM call made (for ``review.json``) and each borderline decision's new fate, by its id:
    kept or dropped by the meta-LLM, best scores first, in batches of ``batch_size`` up to ``max_batches``
    calls; ``unreviewed`` beyond them or without ``meta``."""
    ordered = sorted(borderline, key=lambda d: -d.score.score)
    attempts: list[Attempt] = []
    fates: dict[str, Fated] = {}
    batches = [ordered[i:i + batch_size] for i in range(0, len(ordered), batch_size)]
    calls, started = min(len(batches), max_batches), time.perf_counter()
    for number, batch in enumerate(batches):
        if meta is None or number >= max_batches:
            why = "no meta endpoint" if meta is None else f"review budget of {max_batches} calls spent"
            fates.update({d.id: Fated(Fate.UNREVIEWED, f"borderline, not reviewed ({why})") for d in batch})
            continue
        say(f"meta-LLM review {number + 1}/{calls} ({len(batch)} decisions), "
            f"eta {eta(number, calls, time.perf_counter() - started)}")
        judgements, error, completion = await _review_batch(batch, meta)
        attempts.append(Attempt.of(completion, error))
        for i, d in enumerate(batch):
            j = judgements.get(i)
            if j is None:
                fates[d.id] = Fated(Fate.REVIEWED_DROPPED, error or "the review gave no judgement for this decision")
            else:
                fates[d.id] = Fated(Fate.REVIEWED_KEPT if j.keep else Fate.REVIEWED_DROPPED, j.reason)
    return attempts, fates


async def _review_batch(batch: list[MemoryDecision], meta: LLMClient):
    shown = "\n\n".join(_describe(i, d) for i, d in enumerate(batch))
    schema = review_schema(len(batch))
    messages = [{"role": "system", "content": REVIEW_SYSTEM},
                {"role": "user", "content": f"Decisions:\n\n{shown}\n\nGive a judgement (keep or not, with a short "
                                            "reason) for each decision id.\n" + describe_reply(schema)}]
    completion = await meta.complete(messages, json_schema=schema, schema_name="review")
    reply, error = parse_json_reply(completion.text, ReviewReply)
    if reply is None:
        return {}, f"review reply unusable: {error}", completion
    judgements = {j.id: j for j in reply.judgements if 0 <= j.id < len(batch)}
    return judgements, None, completion


def _describe(i: int, d: MemoryDecision) -> str:
    s = d.score
    ops = "; ".join(d.ops) or "(no operation)"
    text = " | ".join(e["completion"][0]["content"].replace("\n", " ") for e in d.examples)
    observation = d.examples[0]["prompt"][1]["content"].rsplit("Now:", 1)[-1].strip()[:400]
    return (f"[{i}] {d.phase.upper()} at step {d.step}. Situation:\n{observation}\nIt wrote: {text[:300]}\n"
            f"Operations: {ops[:300]}\nAfterwards ({s.window} steps): {s.window_return:+.2f} {s.unit} against "
            f"{s.baseline:+.2f} at the episode's pace (advantage {s.advantage:+.2f}); writes {s.writes} "
            f"(shown by a later PLAN read {s.writes_used}), reads {s.reads} (showing lines {s.reads_with_content}), "
            f"redundant {s.redundant}, empty {s.empty}.")
