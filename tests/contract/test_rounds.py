"""``automem rounds``: structure rounds back to back on real Crafter episodes, the rules meta and a
scripted game model that idles (so every candidate ties its parent: inconclusive, the champion stays)."""

import json
from pathlib import Path

from builders import endpoints_file
from cli_round_storage import storage as cli_round_storage

from automem_dagster import cli
from automem_dagster.rollout.trajectory import read_manifest

storage = cli_round_storage  # the scratch project these CLI rounds run in (cli_round_storage.py)

IDLE = [{"match": "Phase: LOG", "reply": "<|DONE|>"}, {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"}]


def test_rounds_stop_after_patience_rollbacks_each_on_fresh_training_seeds(storage, scripted, tmp_path, capsys):
    server = scripted(IDLE)
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", server, ("game",))
    assert cli.main(["rounds", "--game", "crafter", "--rollout-episodes", "2", "--rollout-max-steps", "3", "--eval-episodes", "2",
                     "--eval-max-steps", "3", "--max-rounds", "4", "--patience", "2", "--meta", "rules",
                     "--endpoints", str(endpoints), "--no-tracking"]) == 0
    said = " ".join(capsys.readouterr().err.split())  # the console wraps its lines
    assert "stopped: 2 round(s) in a row kept nothing (patience 2); 0 of 2 rounds kept a candidate" in said
    decisions = sorted((storage.runs / "decisions" / "crafter").glob("v*.json"))
    # two rounds, not the four allowed; the rules meta answers the second round's evidence with v1's change
    # again, which is rejected before it is played (loop.structure.refuse_judged_again): one verdict file
    assert [d.stem for d in decisions] == ["v1"]
    assert "the candidate is v1 again" in said and "nothing new to evaluate" in said
    assert all(not r["keep"] and r["champion_after"] == 0 for r in map(json.loads, map(Path.read_text, decisions)))
    # Each round diagnosed its own block of training seeds (v0 both times: nothing was kept).
    played = [read_manifest(batch)["seeds"] for batch in sorted((storage.runs / "rollouts" / "crafter" / "v0").iterdir())]
    assert len(played) == 2 and not set(played[0]) & set(played[1])
    assert f"block 0, training seeds {sorted(played[0])}" in said or f"block 0, training seeds {sorted(played[1])}" in said
    assert "block 1, training seeds" in said and said.count("inconclusive (smallest detectable gain unknown (2 seeds") == 1


def test_rounds_then_proficiency_trains_on_the_final_champion(storage, scripted, tmp_path, capsys):
    """``--proficiency`` plays its training rollouts with the champion the rounds ended on, not v0: the
    rules meta drops unused files, which cuts input tokens on every one of 6 seeds (the scripted model
    idles, so progression ties at 0 and replays exactly), and ``equal_score`` keeps v1 (p 1/64 within its
    token route's half of 0.05). The idle model makes no memory decision
    worth curating, so the proficiency round stops at curation and says so."""
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", scripted(IDLE), ("game",))
    assert cli.main(["rounds", "--game", "crafter", "--rollout-episodes", "2", "--rollout-max-steps", "3", "--eval-episodes", "6",
                     "--eval-max-steps", "3", "--max-rounds", "2", "--patience", "1", "--meta", "rules",
                     "--gate", "equal_score", "--gate-metric", "input_tokens_per_step",
                     "--proficiency", "--min-examples", "1000",
                     "--endpoints", str(endpoints), "--no-tracking"]) == 0
    said = " ".join(capsys.readouterr().err.split())
    v1 = json.loads((storage.runs / "decisions" / "crafter" / "v1.json").read_text())
    assert v1["keep"] and v1["champion_after"] == 1
    assert storage.load_lineage("crafter").champion().version == 1
    trained_on = [p.name for p in (storage.runs / "training" / "crafter").iterdir()]
    assert trained_on == ["v1"]
    training_seeds = read_manifest(next((storage.runs / "training" / "crafter" / "v1").iterdir()))["seeds"]
    diagnosis_seeds = {s for batch in (storage.runs / "rollouts" / "crafter").glob("v*/*") for s in read_manifest(batch)["seeds"]}
    assert not set(training_seeds) & diagnosis_seeds
    assert "proficiency round ended before training, as designed" in said and "1000" in said
    assert "Traceback" not in said and "STEP_FAILURE" not in said and "RUN_FAILURE" not in said
