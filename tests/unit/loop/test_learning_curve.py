"""The learning curve reads decided rounds from MLflow's rows and pairs each challenger with its champion."""

import pytest

from automem_dagster.loop.curve import NoRoundsError, learning_curve
from automem_dagster.plots import plot_learning_curve

SEEDS = ",".join(str(s) for s in range(42, 72))


def row(role, version, mean, round_id, decision=None, adapter=None, seeds=SEEDS, max_steps=12):
    """A ``runs_for`` row; a challenger names its round's champion run (``automem.champion_run``)."""
    return {"role": role, "version": version, "adapter": adapter, "progression_mean": mean, "progression_se": 2.0,
            "decision": decision, "run_id": f"{role}-{round_id}", "seeds": seeds, "max_steps": max_steps,
            "champion_run": f"champion-{round_id}" if role in ("candidate", "specialist") else None}


def newest_first(*rows):
    return list(reversed(rows))


def test_rounds_in_order_with_the_agent_in_service_after_each():
    rows = newest_first(
        row("candidate", 1, 50.0, "r1", "rolled_back"), row("champion", 0, 55.0, "r1"),
        row("evaluation", 0, 55.0, None),                       # not a round: left alone
        row("candidate", 2, 70.0, "r2", "kept"), row("champion", 0, 55.0, "r2"),
        row("specialist", 2, 72.0, "a1", "inconclusive", adapter="a1"), row("champion", 2, 70.0, "a1"))
    curve = learning_curve("keydoor", rows)
    assert [(r.loop, r.challenger, r.champion, r.decision) for r in curve.rounds] == [
        ("structure", "v1", "v0", "rolled_back"), ("structure", "v2", "v0", "kept"),
        ("proficiency", "v2 + a1", "v2", "inconclusive")]
    assert [r.in_service for r in curve.rounds] == [55.0, 70.0, 70.0]
    assert curve.left_out == 0 and curve.seed_count == 30
    assert "| 2 | structure | v2 | 70.0 ± 2.0 | v0 | 55.0 ± 2.0 | kept | 70.0 |" in curve.markdown()


def test_rounds_on_another_budget_are_left_out_and_said_so():
    rows = newest_first(
        row("candidate", 1, 50.0, "r1", "rolled_back", seeds="42,43"), row("champion", 0, 50.0, "r1", seeds="42,43"),
        row("candidate", 2, 60.0, "r2", "rolled_back"), row("champion", 0, 61.0, "r2"))
    curve = learning_curve("keydoor", rows)
    assert [r.challenger for r in curve.rounds] == ["v2"] and curve.left_out == 1
    assert "(1 left out: another budget, or no champion run)" in curve.markdown()


def test_a_round_whose_champion_run_is_missing_is_left_out():
    rows = newest_first(row("candidate", 1, 50.0, "r1", "rolled_back"),
                        row("candidate", 2, 60.0, "r2", "rolled_back"), row("champion", 0, 61.0, "r2"))
    curve = learning_curve("keydoor", rows)
    assert [r.challenger for r in curve.rounds] == ["v2"] and curve.left_out == 1


def test_no_decided_round_is_a_clear_error():
    with pytest.raises(NoRoundsError, match="no decided round of 'keydoor'.*automem rounds"):
        learning_curve("keydoor", [row("champion", 0, 50.0, "r1"), row("candidate", 1, 40.0, "r1")])


def test_the_plot_is_written(tmp_path):
    rows = newest_first(row("candidate", 1, 50.0, "r1", "kept"), row("champion", 0, 40.0, "r1"))
    out = plot_learning_curve(learning_curve("keydoor", rows), tmp_path / "curve.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_metrics_name_each_round():
    rows = newest_first(row("candidate", 1, 50.0, "r1", "kept"), row("champion", 0, 40.0, "r1"))
    assert learning_curve("keydoor", rows).metrics() == {"round1_challenger": 50.0, "round1_champion": 40.0,
                                                         "round1_in_service": 50.0}


def test_the_command_reads_the_rounds_from_mlflow_and_logs_the_curve_back(tmp_path, monkeypatch):
    """Two rounds logged as the rounds log them into a real sqlite store: each challenger with its verdict,
    the champion's batch logged once and reused by round 2 (``log_champion_once``), so round 2 has no
    champion run of its own and is paired through its ``automem.champion_run`` tag. ``automem curve``
    draws both and logs itself."""
    from evaluation_runs import evaluation
    from mlflow.tracking import MlflowClient

    from automem_dagster import cli, tracking
    from automem_dagster.tracking import Tracker
    from automem_dagster.tracking.batches import log_champion_once

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, artifact_root=tmp_path / "artifacts")
    verdict = {"keep": False, "outcome": "rolled_back", "mean_difference": -1.0, "stderr_difference": 0.5,
               "ci_low": -2.0, "ci_high": 0.0, "reason": "worse"}
    for version in (1, 2):
        challenger = tracker.log_evaluation(evaluation(version, round_id=f"r{version}", parent=0, verdict=verdict))
        log_champion_once(tracker, evaluation(0, role="champion", round_id=f"r{version}", batch="runs/evaluations/v0"),
                          challenger)
    client = MlflowClient(uri)
    crafter = client.get_experiment_by_name("automem-crafter").experiment_id
    assert len(client.search_runs([crafter], filter_string="tags.`automem.role` = 'champion'")) == 1
    monkeypatch.setattr(tracking, "Tracker", lambda: Tracker(uri, artifact_root=tmp_path / "artifacts"))
    assert cli.main(["curve", "--game", "crafter", "--out", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "learning_curve.md").read_text()
    assert "| 1 | structure | v1 | 11.0 ± 2.0 | v0 | 10.0 ± 2.0 | rolled_back | 10.0 |" in table
    assert "| 2 | structure | v2 | 12.0 ± 2.0 | v0 | 10.0 ± 2.0 | rolled_back | 10.0 |" in table
    (logged,) = client.search_runs([client.get_experiment_by_name("automem-crafter-tables").experiment_id])
    assert logged.data.metrics["round2_in_service"] == 10.0 and logged.data.params["rounds"] == "2"
