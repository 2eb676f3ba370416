"""Decision records and plot tables as the DVC pipeline's decide stages write them (loop/records.py),
from real Crafter batches played by the seeded random agent (no model needed)."""

import asyncio
import json

import pytest

from automem_dagster import cli
from automem_dagster.llm.session import Clients
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.proficiency import exported_adapter
from automem_dagster.loop.records import REJECTED, decision_record, loss_rows, read_evaluation, write_rejected
from automem_dagster.rollout import RolloutSpec, run_batch
from automem_dagster.scaffold import load_scaffold


def play(out, seeds=(42, 43), steps=3):
    spec = RolloutSpec("crafter", load_scaffold("crafter", 0), list(seeds), steps, out, concurrency=1, agent="random")
    return asyncio.run(run_batch(spec, Clients(None, None, None)))


def rejected_revision(folder, reason="wording only: a revision needs a structural change"):
    folder.mkdir()
    (folder / "revision.json").write_text(json.dumps({"rejected_reason": reason, "parent_version": 0}))
    return folder


def test_the_same_agent_on_the_same_seeds_is_inconclusive_on_two_seeds(tmp_path):
    play(tmp_path / "champion")
    play(tmp_path / "candidate")
    record = decision_record("candidate", tmp_path / "candidate", tmp_path / "champion")
    assert record["outcome"] == "inconclusive" and record["keep"] == 0 and record["n"] == 2
    assert record["mean_difference"] == 0.0 and record["reason"].startswith("inconclusive: ")
    assert "the champion stays" in record["reason"]
    assert (record["challenger"], record["champion"]) == ("v0", "v0")
    assert record["gate"] == "significant" and "2 seeds" in record["detectable"]


def test_the_decide_command_writes_the_record_and_both_plot_tables(tmp_path):
    play(tmp_path / "champion")
    play(tmp_path / "candidate")
    out = tmp_path / "decide"
    assert cli.main(["decide", "--role", "candidate", "--challenger", str(tmp_path / "candidate"),
                     "--champion", str(tmp_path / "champion"), "--record", str(out / "record.json"),
                     "--progression", str(out / "progression.json"), "--behaviour", str(out / "behaviour.json")]) == 0
    assert json.loads((out / "record.json").read_text())["outcome"] == "inconclusive"
    # DVC's params choose the gate: the equal_score gate reads tokens per seed, equal here, so it rolls back.
    base = ["decide", "--role", "candidate", "--challenger", str(tmp_path / "candidate"), "--champion",
            str(tmp_path / "champion"), "--record", str(out / "equal.json"), "--progression", str(out / "p.json"),
            "--behaviour", str(out / "b.json"), "--gate", "equal_score", "--gate-level", "0.3", "--gate-min-seeds", "2"]
    assert cli.main([*base, "--gate-metric", ""]) == 2  # params.yaml's empty metric is none, which equal_score needs
    assert cli.main([*base, "--gate-metric", "input_tokens_per_step"]) == 0
    equal = json.loads((out / "equal.json").read_text())
    assert equal["gate"] == "equal_score" and equal["outcome"] == "rolled_back"
    assert "input_tokens_per_step is not lower beyond chance" in equal["reason"]
    rows = json.loads((out / "progression.json").read_text())
    assert len(rows) == 1 and rows[0]["progression_low"] <= rows[0]["progression"] <= rows[0]["progression_high"]
    behaviour = json.loads((out / "behaviour.json").read_text())
    assert {r["metric"] for r in behaviour} == {"unproductive_action_rate", "redundant_write_rate", "empty_search_rate",
                                                "invalid_action_rate", "malformed_turn_rate"}


def test_a_rejected_revision_is_recorded_as_an_outcome(tmp_path):
    play(tmp_path / "champion")
    marker = write_rejected(tmp_path / "candidate", rejected_revision(tmp_path / "revise"))
    assert marker["rejected_reason"].startswith("wording only")
    assert read_evaluation(tmp_path / "candidate") is None
    record = decision_record("candidate", tmp_path / "candidate", tmp_path / "champion")
    assert record["outcome"] == "rejected" and record["keep"] == 0 and record["challenger"] is None
    assert record["mean_difference"] is None and "wording only" in record["reason"]


def test_evaluate_candidate_with_a_rejected_revision_plays_nothing_and_exits_cleanly(tmp_path):
    revise = rejected_revision(tmp_path / "revise")
    out, metrics = tmp_path / "candidate", tmp_path / "candidate.json"
    assert cli.main(["evaluate", "--game", "crafter", "--candidate", str(revise),
                     "--out", str(out), "--metrics", str(metrics)]) == 0
    assert (out / REJECTED).exists() and not (out / "batch.json").exists()
    assert json.loads(metrics.read_text()) == {"episodes": 0, "rejected": 1}


def test_pipeline_evaluations_need_an_out_folder_and_one_role(tmp_path, capsys):
    assert cli.main(["evaluate", "--game", "crafter", "--candidate", str(tmp_path)]) == 2
    assert "give --out" in capsys.readouterr().err
    assert cli.main(["evaluate", "--game", "crafter", "--candidate", str(tmp_path), "--specialist", str(tmp_path),
                     "--out", str(tmp_path / "x")]) == 2


def test_a_folder_that_is_neither_batch_nor_marker_is_named(tmp_path):
    play(tmp_path / "champion")
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(ValueError, match="unfinished holds neither"):
        decision_record("specialist", tmp_path / "unfinished", tmp_path / "champion")


def test_an_adapter_folder_without_training_is_refused_by_name(tmp_path):
    with pytest.raises(RoundError, match="is not a trained adapter .*training.json"):
        exported_adapter(tmp_path, 0)


def test_loss_curves_are_two_tables_one_row_per_logged_step():
    curves = loss_rows({"train_loss": [[1, 2.0], [2, 1.5]], "validation_loss": [[0, 2.2], [2, 1.7]]})
    assert curves == {"train": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}],
                      "validation": [{"step": 0, "loss": 2.2}, {"step": 2, "loss": 1.7}]}
