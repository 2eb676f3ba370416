"""``automem decide`` (the DVC decide stages' command) decides the round's pending candidate in the lineage
with the loops' one decide path, once, and exports that decision flat with both plot tables. Real Crafter
batches played by a scripted game model through the evaluate stages' own commands."""

import json

from builders import endpoints_file
from dvc_stages import WIN, StageProject, evaluated_revision

from automem_dagster import cli
from automem_dagster.loop.records import flat_verdict
from automem_dagster.loop.structure import load_verdict


def decide_args(outputs, *gate):
    out = outputs / "decide"
    return ["decide", "--role", "candidate", "--challenger", str(outputs / "evaluate" / "candidate"), "--champion",
            str(outputs / "evaluate" / "candidate-champion"), "--record", str(out / "record.json"), "--progression",
            str(out / "progression.json"), "--behaviour", str(out / "behaviour.json"), *gate]


def test_the_decide_command_decides_the_pending_candidate_in_the_lineage_once(tmp_path, scripted, monkeypatch):
    project = StageProject(tmp_path / "project")
    endpoints_file(project.root / "endpoints.yaml", scripted(WIN), ("game",))
    project.set_params(endpoints="endpoints.yaml")
    evaluated_revision(project, monkeypatch)
    monkeypatch.chdir(project.root)
    outputs = project.root / "outputs"
    assert cli.main(decide_args(outputs, "--gate", "significant", "--gate-min-seeds", "5")) == 0
    flat = json.loads((outputs / "decide" / "record.json").read_text())
    assert flat["outcome"] == "inconclusive" and flat["keep"] == 0 and flat["n"] == 2 and flat["gate"] == "significant"
    assert (flat["challenger"], flat["champion"], flat["challenger_id"]) == ("v1", "v0", 1)
    assert "the champion stays" in flat["reason"] and "2 seeds" in flat["detectable"]
    lineage = project.storage.load_lineage("crafter")
    assert lineage.record(1).decision == "inconclusive" and lineage.champion().version == 0
    assert flat == json.loads(json.dumps(flat_verdict(load_verdict(project.storage, "crafter", 1), ("v1", "v0"))))
    rows = json.loads((outputs / "decide" / "progression.json").read_text())
    assert [r["agent"] for r in rows] == ["v0", "v1"]
    assert all(r["progression_low"] <= r["progression"] <= r["progression_high"] for r in rows)
    behaviour = json.loads((outputs / "decide" / "behaviour.json").read_text())
    assert {r["metric"] for r in behaviour} == {"unproductive_action_rate", "redundant_write_rate", "empty_search_rate",
                                                "invalid_action_rate", "malformed_turn_rate"}
    # params.yaml's empty metric is none, which equal_score needs: refused before anything is decided.
    equal = ["--gate", "equal_score", "--gate-level", "0.3", "--gate-min-seeds", "2"]
    assert cli.main(decide_args(outputs, *equal, "--gate-metric", "")) == 2
    # Another gate on the same batches: the decision was taken, and is written again as it was.
    assert cli.main(decide_args(outputs, *equal, "--gate-metric", "input_tokens_per_step")) == 0
    assert json.loads((outputs / "decide" / "record.json").read_text()) == flat
