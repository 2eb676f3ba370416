"""Both loops' decisions are one record (``loop.challenger.VerdictRecord``), and the files the two
loops wrote before they shared it still load as that record: a report reads every decision file of
a game, those from older rounds included."""

import json

from automem_dagster.loop.challenger import VerdictRecord
from automem_dagster.loop.proficiency import load_specialist_verdict
from automem_dagster.loop.report import version_points
from automem_dagster.loop.storage import Storage
from automem_dagster.loop.structure import load_verdict

COMPARISON = {"candidate_mean": 0.5, "champion_mean": 0.25, "mean_difference": 25.0, "stderr_difference": 5.0,
              "ci_low": 15.0, "ci_high": 35.0, "n": 2, "p_value": 0.25}


def old_structure_record(batches) -> dict:
    """``asdict`` of the structure loop's record as written before the shared one (``v<N>.json``)."""
    return {"game": "crafter", "candidate": 1, "champion_before": 0, "champion_after": 1, "keep": True,
            "reason": "kept: higher mean", "comparison": COMPARISON, "candidate_batch": str(batches / "v1"),
            "champion_batch": str(batches / "v0"),
            "gate": {"rule": "higher_mean", "level": 0.05, "min_seeds": 5, "metric": None, "margin": 5.0},
            "sampling": {"candidate": {}, "champion": {}}, "identity": {}, "detectable": {}, "metric": {}}


def old_specialist_record() -> dict:
    """The proficiency loop's record as written before the shared one (``specialist-<id>.json``), of a round
    from before decisions kept their gate and evidence."""
    return {"game": "crafter", "adapter": "a1", "scaffold_version": 0, "champion_before": None,
            "champion_after": None, "keep": False, "reason": "rolled back: not higher", "comparison": COMPARISON,
            "specialist_batch": "runs/evaluations/crafter/v0/s-specialist-a1", "champion_batch": "runs/evaluations/v0"}


def write(storage: Storage, name: str, record: dict) -> None:
    path = storage.runs / "decisions" / "crafter" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_a_structure_decision_written_by_the_old_code_loads_as_the_shared_record(tmp_path):
    storage = Storage(runs=tmp_path / "runs", lineage=tmp_path / "lineage", specialists=tmp_path / "specialists")
    write(storage, "v1", old_structure_record(tmp_path))
    record = load_verdict(storage, "crafter", 1)
    assert (record.role, record.challenger, record.scaffold_version) == ("candidate", 1, 1)
    assert record.challenger_batch == str(tmp_path / "v1") and record.champion_batch == str(tmp_path / "v0")
    assert record.outcome == "kept" and record.gate["rule"] == "higher_mean" and record.comparison == COMPARISON
    # The progression-by-version plot reads every decision file of the game, this old one included.
    with storage.update_lineage("crafter") as lineage:
        lineage.record_candidate(1, 0, "hash-v1", None)
    for version, mean in ((0, 25.0), (1, 50.0)):
        (tmp_path / f"v{version}").mkdir()
        (tmp_path / f"v{version}" / "summary.json").write_text(json.dumps({"progression": {"mean": mean, "stderr": 1.0}}))
    assert {p.version: p.mean for p in version_points(storage, "crafter")} == {0: 25.0, 1: 50.0}


def test_a_specialist_decision_written_by_the_old_code_loads_as_the_shared_record(tmp_path):
    storage = Storage(runs=tmp_path / "runs")
    write(storage, "specialist-a1", old_specialist_record())
    record = load_specialist_verdict(storage, "crafter", "a1")
    assert (record.role, record.challenger, record.scaffold_version) == ("specialist", "a1", 0)
    assert record.challenger_batch.endswith("-specialist-a1") and record.outcome == "rolled_back"
    assert record.gate == {} and record.detectable == {}
    assert load_specialist_verdict(storage, "crafter", "a2") is None


def test_a_new_record_reads_back_as_written():
    record = VerdictRecord.from_json(old_specialist_record())
    assert VerdictRecord.from_json(json.loads(json.dumps(record.__dict__))) == record
