"""Scaffold lineage: v0 as baseline, round trips, promotion only after a keep, a save that
cannot corrupt the champion pointer, and a clear error for a damaged file."""

import os
import re
import shutil

import pytest

from automem_dagster.metrics.paired import compare_paired
from automem_dagster.metrics.verdict import gate_verdict
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.scaffold import content_hash, load_scaffold
from automem_dagster.scaffold.lineage import Lineage, LineageError, render_tree

SEEDS = range(42, 47)
WIN = gate_verdict(compare_paired(dict.fromkeys(SEEDS, 0.5), dict.fromkeys(SEEDS, 0.25), n_resamples=100))
LOSS = gate_verdict(compare_paired(dict.fromkeys(SEEDS, 0.25), dict.fromkeys(SEEDS, 0.5), n_resamples=100))


@pytest.fixture
def dirs(tmp_path):
    """An isolated scaffolds root holding only crafter v0, and an empty lineage root."""
    scaffolds = tmp_path / "scaffolds"
    (scaffolds / "crafter").mkdir(parents=True)
    shutil.copy(SCAFFOLDS / "crafter" / "v0.yaml", scaffolds / "crafter" / "v0.yaml")
    return tmp_path / "lineage", scaffolds


def load(dirs):
    return Lineage.load("crafter", root=dirs[0], scaffolds=dirs[1])


def with_kept_v1(dirs):
    lineage = load(dirs)
    lineage.record_candidate(1, 0, "hash-v1", "runs/diagnosis-1.md")
    lineage.record_verdict(1, WIN)
    lineage.promote(1)
    return lineage


def test_without_a_file_v0_is_the_baseline_champion(dirs):
    lineage = load(dirs)
    champion = lineage.champion()
    assert (champion.game, champion.version) == ("crafter", 0)
    assert champion.content_hash == content_hash(load_scaffold("crafter", 0, dirs[1]))
    assert lineage.record(0).decision == "baseline"
    assert not (dirs[0] / "crafter.json").exists()  # loading writes nothing


def test_without_a_file_or_v0_there_is_nothing_to_start_from(dirs):
    with pytest.raises(LineageError, match="create the v0 scaffold"):
        Lineage.load("nethack", root=dirs[0], scaffolds=dirs[1])


def test_round_trip_keeps_records_decisions_and_champion(dirs):
    lineage = with_kept_v1(dirs)
    lineage.record_candidate(2, 1, "hash-v2", None)
    lineage.record_verdict(2, LOSS)
    lineage.record_candidate(3, 1, "hash-v3", None)
    lineage.record_verdict(3, "no structural change: wording only")
    lineage.save()
    again = load(dirs)
    assert again.versions == lineage.versions and again.champion() == lineage.champion()
    assert again.champion().version == 1 and again.champion().content_hash == "hash-v1"
    v1 = again.record(1)
    assert (v1.decision, v1.diagnosis, v1.reason) == ("kept", "runs/diagnosis-1.md", WIN.reason)
    assert (v1.evaluation.candidate_mean, v1.evaluation.champion_mean, v1.evaluation.seeds) == (50.0, 25.0, list(SEEDS))
    assert again.record(2).decision == "rolled_back" and again.record(2).evaluation.mean_difference == -25.0
    assert (again.record(3).decision, again.record(3).evaluation) == ("rejected", None)


def test_promotion_only_after_keep(dirs):
    lineage = with_kept_v1(dirs)
    since = lineage.champion().since
    lineage.record_candidate(2, 1, "hash-v2", None)
    with pytest.raises(LineageError, match="pending"):
        lineage.promote(2)
    lineage.record_verdict(2, LOSS)
    with pytest.raises(LineageError, match="rolled_back"):
        lineage.promote(2)
    lineage.record_candidate(3, 1, "hash-v3", None)
    lineage.record_verdict(3, "invalid patch")
    with pytest.raises(LineageError, match="rejected"):
        lineage.promote(3)
    with pytest.raises(LineageError, match="baseline"):
        lineage.promote(0)
    assert lineage.champion().version == 1
    assert lineage.promote(1).since == since  # a retried promotion changes nothing


def test_decisions_are_final_and_candidates_need_a_known_parent(dirs):
    lineage = with_kept_v1(dirs)
    with pytest.raises(LineageError, match="already decided"):
        lineage.record_verdict(1, LOSS)
    with pytest.raises(LineageError, match="already in the lineage"):
        lineage.record_candidate(1, 0, "x", None)
    with pytest.raises(LineageError, match="v7 is not in the lineage"):
        lineage.record_candidate(8, 7, "x", None)
    with pytest.raises(LineageError, match="earlier version"):
        lineage.record_candidate(2, 2, "x", None)


def test_next_version_counts_scaffold_files_and_records(dirs):
    lineage = load(dirs)
    assert lineage.next_version() == 1
    shutil.copy(dirs[1] / "crafter" / "v0.yaml", dirs[1] / "crafter" / "v3.yaml")  # written, not yet recorded
    assert lineage.next_version() == 4
    lineage.record_candidate(5, 0, "x", None)
    assert lineage.next_version() == 6


def test_a_crash_during_save_leaves_the_previous_file_intact(dirs, monkeypatch):
    lineage = with_kept_v1(dirs)
    path = lineage.save()
    before = path.read_bytes()
    lineage.record_candidate(2, 1, "hash-v2", None)
    lineage.record_verdict(2, WIN)
    lineage.promote(2)

    def crash(src, dst):
        raise OSError("disk vanished")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk vanished"):
        lineage.save()
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert load(dirs).champion().version == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["crafter.json"]  # no temp file left behind


@pytest.mark.parametrize("damage", [
    lambda text: text[: len(text) // 2],                                # truncated mid-write by another tool
    lambda text: text.replace('"decision": "kept"', '"decision": "rolled_back"'),  # champion not kept
])
def test_a_corrupted_file_names_the_file_and_what_to_do(dirs, damage):
    path = with_kept_v1(dirs).save()
    path.write_text(damage(path.read_text()))
    with pytest.raises(LineageError, match=rf"{re.escape(str(path))} is corrupted .*restore it from version control"):
        load(dirs)


def test_render_tree_shows_branches_decisions_scores_and_champion(dirs):
    lineage = with_kept_v1(dirs)
    lineage.record_candidate(2, 1, "hash-v2", None)
    lineage.record_verdict(2, LOSS)
    lineage.record_candidate(3, 0, "hash-v3", None)
    assert render_tree(lineage).splitlines() == [
        "crafter lineage (champion v1)",
        "└── v0  baseline",
        "    ├── v1  kept  50.0% vs 25.0% (+25.0 ± 0.0, n=5)  [champion]",
        "    │   └── v2  rolled_back  25.0% vs 50.0% (-25.0 ± 0.0, n=5)",
        "    └── v3  pending",
    ]


def test_an_inconclusive_decision_is_recorded_as_such_and_cannot_be_promoted(dirs):
    few = gate_verdict(compare_paired({42: 0.5, 43: 0.25}, {42: 0.25, 43: 0.25}, n_resamples=100))
    assert few.outcome == "inconclusive"
    lineage = load(dirs)
    lineage.record_candidate(1, 0, "hash-v1", "runs/diagnosis-1.md")
    assert lineage.record_verdict(1, few).decision == "inconclusive"
    with pytest.raises(LineageError, match="its decision is inconclusive"):
        lineage.promote(1)
    lineage.save()
    assert load(dirs).record(1).decision == "inconclusive" and load(dirs).champion().version == 0
