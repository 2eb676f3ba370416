"""The DVC pipeline's stage records (``loop/records.py``) and what its decide stages refuse or record without
deciding (``loop/dvc_round.py``), from real Crafter batches played by the seeded random agent (no model
needed; tests/contract/test_decide_command.py decides memory-agent batches)."""

import asyncio
import json
import shutil

import pytest

from automem_dagster import cli
from automem_dagster.commands import shared
from automem_dagster.llm.session import Clients
from automem_dagster.loop.dvc_round import pipeline_verdict
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.proficiency import exported_adapter
from automem_dagster.loop.records import (
    REJECTED,
    loss_rows,
    pass_on_resumed,
    read_evaluation,
    write_rejected,
    write_resumed,
)
from automem_dagster.loop.storage import Storage
from automem_dagster.loop.structure import register_candidate
from automem_dagster.paths import ASSETS
from automem_dagster.rollout import RolloutSpec, run_batch
from automem_dagster.scaffold import load_scaffold


@pytest.fixture
def storage(tmp_path, monkeypatch) -> Storage:
    """A project of its own (the committed assets), which the commands use too."""
    shutil.copytree(ASSETS, tmp_path / "home" / "assets")
    store = Storage.under(tmp_path / "home")
    monkeypatch.setattr(shared, "STORAGE", store)
    return store


def candidate(storage: Storage, register: bool = True):
    """v1: v0 with another PLAN prompt (the random agent plays it the same), registered pending."""
    champion = load_scaffold("crafter", 0, storage.scaffolds)
    v1 = champion.model_copy(update={"version": 1, "parent": 0, "plan_prompt": champion.plan_prompt + " Again."})
    if register:
        register_candidate(v1, 0, None, storage, storage.runs)
    return v1


def play(out, scaffold, seeds=(42, 43), steps=3):
    spec = RolloutSpec("crafter", scaffold, list(seeds), steps, out, concurrency=1, agent="random")
    return asyncio.run(run_batch(spec, Clients(None, None, None)))


def rejected_revision(folder, reason="wording only: a revision needs a structural change"):
    folder.mkdir()
    (folder / "revision.json").write_text(json.dumps({"rejected_reason": reason, "parent_version": 0}))
    return folder


def test_a_candidate_batch_the_lineage_did_not_register_is_refused(tmp_path, storage):
    play(tmp_path / "champion", load_scaffold("crafter", 0, storage.scaffolds))
    play(tmp_path / "candidate", candidate(storage, register=False))
    with pytest.raises(RoundError, match="was not played by crafter v1 as the lineage registered it"):
        pipeline_verdict("candidate", tmp_path / "candidate", tmp_path / "champion", storage)
    assert storage.load_lineage("crafter").next_version() == 1


def test_a_rejected_revision_is_recorded_as_an_outcome_and_the_lineage_is_untouched(tmp_path, storage):
    before = storage.load_lineage("crafter").path.read_text()
    marker = write_rejected(tmp_path / "candidate", rejected_revision(tmp_path / "revise"))
    assert marker["rejected_reason"].startswith("wording only")
    assert read_evaluation(tmp_path / "candidate") is None
    record, batches = pipeline_verdict("candidate", tmp_path / "candidate", tmp_path / "champion", storage)
    assert record["outcome"] == "rejected" and record["keep"] == 0 and record["challenger"] is None
    assert record["mean_difference"] is None and "wording only" in record["reason"] and batches == {}
    assert storage.load_lineage("crafter").path.read_text() == before


def test_a_resumed_marker_is_passed_on_and_nothing_else_is(tmp_path):
    assert pass_on_resumed(tmp_path / "rollout", tmp_path / "diagnose") is None
    write_resumed(tmp_path / "rollout", "candidate", 3)
    assert pass_on_resumed(tmp_path / "rollout", tmp_path / "diagnose") == {"role": "candidate", "challenger": 3}
    assert json.loads((tmp_path / "diagnose" / "resumed.json").read_text())["challenger"] == 3


def test_evaluate_candidate_with_a_rejected_revision_plays_nothing_and_exits_cleanly(tmp_path):
    revise = rejected_revision(tmp_path / "revise")
    out, beside, metrics = tmp_path / "candidate", tmp_path / "candidate-champion", tmp_path / "candidate.json"
    assert cli.main(["evaluate", "--game", "crafter", "--candidate", str(revise), "--out", str(out),
                     "--beside-champion", str(beside), "--metrics", str(metrics)]) == 0
    for folder in (out, beside):  # the champion is not played either
        assert [p.name for p in folder.iterdir()] == [REJECTED]
    assert json.loads(metrics.read_text()) == {"episodes": 0, "rejected": 1}


def test_pipeline_evaluations_need_an_out_folder_and_one_role(tmp_path, capsys):
    assert cli.main(["evaluate", "--game", "crafter", "--candidate", str(tmp_path)]) == 2
    assert "give --out, --beside-champion" in capsys.readouterr().err
    assert cli.main(["evaluate", "--game", "crafter", "--candidate", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert cli.main(["evaluate", "--game", "crafter", "--candidate", str(tmp_path), "--specialist", str(tmp_path),
                     "--out", str(tmp_path / "x")]) == 2


def test_a_folder_that_is_neither_batch_nor_marker_is_named(tmp_path, storage):
    play(tmp_path / "champion", load_scaffold("crafter", 0, storage.scaffolds))
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(ValueError, match="unfinished holds neither"):
        pipeline_verdict("specialist", tmp_path / "unfinished", tmp_path / "champion", storage)


def test_an_adapter_folder_without_training_is_refused_by_name(tmp_path):
    with pytest.raises(RoundError, match="is not a trained adapter .*training.json"):
        exported_adapter(tmp_path, 0)


def test_loss_curves_are_two_tables_one_row_per_logged_step():
    curves = loss_rows({"train_loss": [[1, 2.0], [2, 1.5]], "validation_loss": [[0, 2.2], [2, 1.7]]})
    assert curves == {"train": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}],
                      "validation": [{"step": 0, "loss": 2.2}, {"step": 2, "loss": 1.7}]}
