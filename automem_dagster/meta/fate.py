"""A memory decision's fate in curation: one value of ``Fate`` with the reason that quotes the numbers.

"Fate" is curation's word, kept apart from "verdict" (a round's keep, roll-back or inconclusive on its
challenger, ``metrics.verdict.Verdict``): each curation stage (the cheap score in ``meta/decisions.py``,
the replay in ``meta/curation_review.py``, the meta-LLM in ``meta/meta_review.py``, the caps in
``meta/curation_caps.py``) returns the new ``Fated`` of the decisions it judged rather than changing
them, and ``curate`` alone sets them, so the order of the stages is written in one place.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class Fate(StrEnum):
    """Where curation left a memory decision (the value is what ``decisions.jsonl`` and ``stats.json`` hold)."""

    ACCEPTED = "accepted"
    """Taken: its replayed effect is above the credit floor, or (unmeasured, by opt-in) its cheap score at or above
    ``accept_score``."""
    BORDERLINE = "borderline"
    """Its cheap score lies between ``review_floor`` and ``accept_score``: the meta-LLM decides (by opt-in only)."""
    REJECTED = "rejected"
    """Malformed, or its replayed effect (or its cheap score) is at or below the floor."""
    INELIGIBLE = "ineligible"
    """Uncredited: nothing it wrote was read later, nothing it read showed a line; never replayed."""
    UNMEASURED = "unmeasured"
    """Eligible, but the replay did not reach it (budget, no endpoints, a replay error)."""
    UNRESOLVED = "unresolved"
    """Its arms' memory differed but their play did not diverge within the replay's horizon."""
    UNREVIEWED = "unreviewed"
    """Borderline, but no meta-LLM call was left to review it."""
    REVIEWED_KEPT = "reviewed_kept"
    REVIEWED_DROPPED = "reviewed_dropped"
    DUPLICATE = "duplicate"
    """Its examples repeat kept ones exactly, or its completion is already kept ``max_repeats`` times."""
    BALANCED_OUT = "balanced_out"
    """Its episode already contributes its share of decisions."""


KEPT = frozenset({Fate.ACCEPTED, Fate.REVIEWED_KEPT})
"""The fates that train, before duplicates and the per-episode balance are taken out."""


class Fated(NamedTuple):
    """What a curation stage returns for one decision: its new fate and the reason, in words."""

    fate: Fate
    reason: str


def fate_counts(stats: dict) -> dict[str, int]:
    """How many decisions met each fate, from a curation's ``stats.json``: ``fates``, or ``verdicts`` in the
    files curated before the word was curation's own."""
    return stats["fates"] if "fates" in stats else stats["verdicts"]
