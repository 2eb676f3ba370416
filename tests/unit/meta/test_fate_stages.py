"""Each curation stage returns the new fate of the decisions it judged and changes none of them
(``meta/fate.py``); ``curate`` alone sets them."""

from __future__ import annotations

import asyncio

from curation_episodes import SCAFFOLD, write_episode

from automem_dagster.meta.curation_caps import balance, dedupe
from automem_dagster.meta.decisions import MemoryDecisionScore, ScoreWeights, cheap_fate, extract_decisions
from automem_dagster.meta.fate import KEPT, Fate, Fated, fate_counts
from automem_dagster.meta.meta_review import review_borderline


def _score(**fields) -> MemoryDecisionScore:
    return MemoryDecisionScore("progression", 2, **fields)


def test_the_cheap_score_gives_each_decision_one_fate_with_its_numbers():
    assert cheap_fate(_score(malformed=1, credited=True, score=9.0), 1.0, 0.0) == Fated(
        Fate.REJECTED, "a turn of this decision was malformed")
    assert cheap_fate(_score(score=9.0), 1.0, 0.0).fate is Fate.INELIGIBLE          # uncredited, however it scores
    assert cheap_fate(_score(credited=True, score=1.0), 1.0, 0.0) == Fated(Fate.ACCEPTED, "score 1 >= 1")
    assert cheap_fate(_score(credited=True, score=0.5), 1.0, 0.0).fate is Fate.BORDERLINE
    assert cheap_fate(_score(credited=True, score=-0.5), 1.0, 0.0) == Fated(Fate.REJECTED, "score -0.5 < 0")
    assert KEPT == {Fate.ACCEPTED, Fate.REVIEWED_KEPT}


def _decisions(tmp_path, seeds):
    for seed in seeds:
        write_episode(tmp_path, seed)
    paths = sorted(tmp_path.rglob("*.jsonl"))
    return [d for p in paths for d in extract_decisions(p, SCAFFOLD, ScoreWeights(horizon=2)) if d.score.eligible]


def test_the_caps_return_what_they_keep_and_the_fate_of_the_rest(tmp_path):
    decisions = _decisions(tmp_path, (1001, 1002, 1003))   # identical episodes: 3 eligible decisions each
    kept, duplicates = dedupe(decisions, max_repeats=5)
    assert len(kept) == 3 and len(duplicates) == 6
    assert {f.fate for f in duplicates.values()} == {Fate.DUPLICATE}
    assert all(d.fate is None for d in decisions)               # nothing was changed in place
    # 3 decisions of one episode and 1 of another: at most the mean (2) per episode, equal effects in step order.
    kept, balanced_out = balance(decisions[:4], share=1.0)
    assert [d.id for d in kept] == ["crafter__seed1001/step0/plan", "crafter__seed1001/step1/log",
                                    "crafter__seed1002/step0/plan"]
    assert balanced_out == {"crafter__seed1001/step1/plan": Fated(Fate.BALANCED_OUT,
                                                                  "episode already contributes 2 decisions")}


def test_without_a_meta_endpoint_the_borderline_stay_unreviewed(tmp_path):
    decisions = _decisions(tmp_path, (1001,))
    attempts, fates = asyncio.run(review_borderline(decisions, 2, 10, None, lambda _: None))
    assert attempts == [] and set(fates) == {d.id for d in decisions}
    assert {f for f in fates.values()} == {Fated(Fate.UNREVIEWED, "borderline, not reviewed (no meta endpoint)")}
    assert all(d.fate is None for d in decisions)


def test_a_stats_file_curated_before_fates_still_counts():
    assert fate_counts({"verdicts": {"accepted": 2}}) == {"accepted": 2}
    assert fate_counts({"fates": {"rejected": 1}}) == {"rejected": 1}
