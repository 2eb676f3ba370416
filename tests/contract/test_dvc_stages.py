"""Single DVC stages run by the real ``dvc`` on stand-in data: the decide stage decides once, under
params.yaml's gate, and a too-small dataset runs the proficiency stages to a recorded outcome instead of failing.
Real Crafter episodes, played by a scripted game model (no embedded model, no training)."""

import json

from builders import endpoints_file
from dvc_stages import WIN, StageProject, evaluated_revision


def test_the_decide_stage_decides_once_under_the_gate_params_yaml_names(tmp_path, scripted, monkeypatch):
    """A pending candidate that wins on 2 seeds, decided by ``dvc repro decide`` under the significant gate
    (at least 5 seeds): inconclusive, recorded in the lineage, the champion stays. A changed gate reruns
    the stage, which writes the recorded decision again: a decision is taken once, the new gate decides
    the next round."""
    project = StageProject(tmp_path / "project")
    endpoints_file(project.root / "endpoints.yaml", scripted(WIN), ("game",))
    project.set_params(endpoints="endpoints.yaml")
    evaluated_revision(project, monkeypatch)
    record = project.root / "outputs" / "decide" / "structure.json"

    project.set_params(gate={"rule": "significant", "min_seeds": 5})
    project.dvc("repro", "--single-item", "decide")
    significant = json.loads(record.read_text())
    assert significant["outcome"] == "inconclusive" and significant["keep"] == 0 and significant["mean_difference"] > 0
    assert significant["gate"] == "significant" and significant["gate_min_seeds"] == 5 and "5" in significant["reason"]
    lineage = project.storage.load_lineage("crafter")
    assert lineage.record(1).decision == "inconclusive" and lineage.champion().version == 0

    project.set_params(gate={"rule": "higher_mean"})
    assert "Running stage 'decide'" in project.dvc("repro", "--single-item", "decide")
    assert json.loads(record.read_text()) == significant
    assert project.storage.load_lineage("crafter").champion().version == 0


def test_a_dataset_below_the_minimum_is_the_proficiency_rounds_recorded_outcome(tmp_path, scripted):
    """``dvc repro decide_specialist``: curation keeps fewer than ``curate.min_examples``, so nothing is
    trained or played, every stage succeeds and the decision says why."""
    project = StageProject(tmp_path / "project")
    endpoints_file(project.root / "endpoints.yaml", scripted(WIN), ("game", "meta"))
    project.set_params(endpoints="endpoints.yaml", rollout={"episodes": 2, "max_steps": 2},
                       evaluate={"episodes": 2, "max_steps": 2}, curate={"min_examples": 400})
    project.dvc("repro", "decide_specialist")
    assert project.storage.load_lineage("crafter").champion().version == 0
    outputs = project.root / "outputs"
    record = json.loads((outputs / "decide" / "proficiency.json").read_text())
    assert record["outcome"] == "dataset_too_small" and record["keep"] == 0 and record["challenger"] is None
    assert "fewer than the minimum of 400" in record["reason"] and record["mean_difference"] is None
    for stage in ("curate", "finetune", "evaluate/specialist", "evaluate/specialist-champion"):
        assert (outputs / stage / "too_small.json").exists(), stage
    assert not (outputs / "finetune" / "adapter.gguf").exists()
    assert json.loads((outputs / "finetune-metrics.json").read_text()) == {"too_small": 1}
    assert json.loads((outputs / "finetune-loss" / "train.json").read_text()) == []
    assert json.loads((outputs / "evaluate" / "specialist.json").read_text()) == {"episodes": 0, "too_small": 1}
    assert json.loads((outputs / "decide" / "proficiency-progression.json").read_text()) == []  # nothing was played
    assert "up to date" in project.dvc("status", "decide_specialist")
