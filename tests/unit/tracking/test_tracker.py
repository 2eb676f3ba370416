"""Tracker against a real sqlite MLflow store in a temp dir, read back with a separate MlflowClient."""

import json
import re

import pytest
from evaluation_runs import BEHAVIOUR, RETRIES, endpoints, evaluation
from mlflow.tracking import MlflowClient

from automem_dagster.tracking import Tracker, TrackingError, default_tracking_uri

SECRET = "sk-test-DO-NOT-LOG-1234567890abcdef"


ALLOWED_PARAMS = {"version", "parent", "content_hash", "game", "seeds", "n_seeds", "max_steps", "role", "round_id", "agent",
                  "window", "meta_mode"}
ENDPOINT_FIELDS = {"name", "model", "base_url", "constrained", "temperature", "lora_id"}


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """Three evaluations logged once: crafter v0 (champion), crafter v1 (candidate, kept), minihack v0."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlflow.db"
    tracker = Tracker(uri, ui_url="http://ui.test:5000/", artifact_root=root / "artifacts")
    plot = root / "progression.png"
    plot.write_bytes(b"\x89PNG fake")
    extra = root / "evidence.json"
    extra.write_text("{}")
    verdict = {"keep": True, "reason": "candidate mean 11.0 > champion 10.0", "mean_difference": 1.0,
                "stderr_difference": 0.5, "ci_low": 0.2, "ci_high": 1.8}
    v0 = tracker.log_evaluation(evaluation(0))
    diagnosis = {"meta_mode": "tools", "metrics": {"diagnosis_tool_calls": 6, "diagnosis_tokens": 41_900,
                                                   "diagnosis_input_tokens": 41_000, "diagnosis_steps_read": 51}}
    v1 = tracker.log_evaluation(evaluation(1, verdict=verdict, diagnosis_md="# why", diff_md="+ file", diagnosis=diagnosis,
                                           plots=[plot], extra_artifacts=[extra], endpoints=endpoints(SECRET)))
    mh = tracker.log_evaluation(evaluation(0, family="minihack"))
    return {"tracker": tracker, "client": MlflowClient(uri), "root": root, "v0": v0, "v1": v1, "mh": mh}


def test_one_experiment_per_family(logged):
    client = logged["client"]
    crafter = client.get_experiment_by_name("automem-crafter")
    minihack = client.get_experiment_by_name("automem-minihack")
    assert logged["v0"].experiment_id == logged["v1"].experiment_id == crafter.experiment_id
    assert logged["mh"].experiment_id == minihack.experiment_id != crafter.experiment_id
    assert crafter.tags["automem.family"] == "crafter"
    assert crafter.artifact_location.startswith((logged["root"] / "artifacts").as_uri())
    assert logged["tracker"].experiment_id("crafter") == crafter.experiment_id


def test_params_metrics_tags_of_a_decided_candidate(logged):
    run = logged["client"].get_run(logged["v1"].run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "v1-candidate-2026-W48"
    params = run.data.params
    assert params["version"] == "1" and params["parent"] == "0" and params["content_hash"] == "hash1"
    assert params["seeds"] == "42,43,44" and params["n_seeds"] == "3" and params["max_steps"] == "100"
    assert params["endpoint.game.model"] == "smollm2" and params["endpoint.meta.base_url"] == "https://api.example.com/v1"
    assert params["endpoint.game.constrained"] == "True" and params["round_id"] == "2026-W48"
    metrics = run.data.metrics
    assert metrics["progression_mean"] == 11.0 and metrics["progression_se"] == 2.0
    assert {k: metrics[k] for k in BEHAVIOUR} == BEHAVIOUR
    assert {k: metrics[k] for k in RETRIES} == RETRIES
    assert metrics["total_input_tokens"] == 300_000 and metrics["total_output_tokens"] == 8_000
    assert metrics["decision_keep"] == 1.0 and metrics["decision_mean_difference"] == 1.0
    assert (metrics["decision_stderr"], metrics["decision_ci_low"], metrics["decision_ci_high"]) == (0.5, 0.2, 1.8)
    assert params["meta_mode"] == "tools" and metrics["diagnosis_tool_calls"] == 6 and metrics["diagnosis_steps_read"] == 51
    assert metrics["diagnosis_tokens"] == 41_900 and metrics["diagnosis_input_tokens"] == 41_000
    history = logged["client"].get_metric_history(run.info.run_id, "progression_seed")
    assert sorted((m.step, m.value) for m in history) == [(42, 4.5), (43, 9.0), (44, 14.5)]
    tags = run.data.tags
    assert tags["automem.decision"] == "kept" and tags["automem.version"] == "1" and tags["automem.parent"] == "0"
    assert tags["automem.role"] == "candidate" and tags["automem.round"] == "2026-W48"
    assert tags["automem.family"] == "crafter" and tags["automem.game"] == "crafter"
    assert "11.0 ± 2.0 %" in tags["mlflow.note.content"] and "kept" in tags["mlflow.note.content"]


def test_artifacts(logged):
    client, run_id = logged["client"], logged["v1"].run_id
    top = {f.path for f in client.list_artifacts(run_id)}
    assert top == {"scaffold", "diagnosis.md", "diff.md", "decision.json", "plots", "evidence.json"}
    assert [f.path for f in client.list_artifacts(run_id, "scaffold")] == ["scaffold/v1.yaml"]
    assert [f.path for f in client.list_artifacts(run_id, "plots")] == ["plots/progression.png"]
    local = client.download_artifacts(run_id, "decision.json", str(logged["root"] / "download"))
    with open(local) as f:
        assert json.load(f)["keep"] is True


def test_no_decision_means_no_decision_record(logged):
    run = logged["client"].get_run(logged["v0"].run_id)
    assert run.info.run_name == "v0-champion"
    assert "automem.decision" not in run.data.tags and "automem.parent" not in run.data.tags
    assert not any(k.startswith("decision_") for k in run.data.metrics)
    assert {f.path for f in logged["client"].list_artifacts(run.info.run_id)} == {"scaffold"}


def test_only_allowed_params_and_never_an_api_key(logged):
    for key in ("v0", "v1", "mh"):
        run = logged["client"].get_run(logged[key].run_id)
        for name in run.data.params:
            if name.startswith("endpoint."):
                _, role, field = name.split(".")
                assert role in {"game", "meta"} and field in ENDPOINT_FIELDS, name
            else:
                assert name in ALLOWED_PARAMS, name
        logged_text = json.dumps([run.data.params, run.data.tags])
        assert SECRET not in logged_text


def test_url_points_into_the_ui(logged):
    tracked = logged["v1"]
    assert tracked.url == f"http://ui.test:5000/#/experiments/{tracked.experiment_id}/runs/{tracked.run_id}"


def test_runs_for_is_newest_first(logged):
    rows = logged["tracker"].runs_for("crafter")
    assert [(r["version"], r["role"], r["decision"]) for r in rows] == [(1, "candidate", "kept"), (0, "champion", None)]
    assert rows[0]["run_id"] == logged["v1"].run_id and rows[0]["progression_mean"] == 11.0
    assert rows[1]["progression_se"] == 2.0
    assert logged["tracker"].runs_for("nethack") == []


def test_failed_logging_marks_the_run_failed(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    bad = evaluation(2, behaviour=BEHAVIOUR | {"steps": "many"})
    with pytest.raises(TypeError):
        Tracker(uri, artifact_root=tmp_path / "artifacts").log_evaluation(bad)
    (run,) = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("automem-crafter").experiment_id])
    assert run.info.status == "FAILED"


def test_invalid_evaluation_names_the_input(tmp_path):
    with pytest.raises(ValueError, match="per_seed"):
        evaluation(1, per_seed={42: 1.0})
    with pytest.raises(ValueError, match="role 'boss'"):
        evaluation(1, role="boss")
    with pytest.raises(FileNotFoundError, match="missing.png"):
        evaluation(1, plots=[tmp_path / "missing.png"])


def test_broken_store_raises_tracking_error(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_text("not a database")
    with pytest.raises(TrackingError, match=re.escape(str(db))):
        Tracker(f"sqlite:///{db}").runs_for("crafter")


def test_default_uri(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert re.fullmatch(r"sqlite:////.+/mlflow/mlflow\.db", default_tracking_uri())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.test:5000")
    assert default_tracking_uri() == "http://tracking.test:5000"
    assert Tracker().tracking_uri == "http://tracking.test:5000" and Tracker().artifact_root is None
