"""Whole structure-loop rounds on real Crafter episodes, with a scripted server as every model.

The scripted game model plays ``do`` (which unlocks an achievement within a few steps on
these seeds) only when the scaffold's PLAN prompt carries ``WIN-MARKER``, and ``noop``
otherwise; the scripted meta-LLM returns fixed diagnoses and patches. So a patch that adds
the marker makes a candidate that really wins on the evaluation seeds, and one without it
really ties.
"""

import json
from datetime import datetime

import pytest
from structure_round_rules import (
    GAME_RULES,
    SETTINGS,
    meta_rules,
    patch_reply,
    run,
)
from structure_round_rules import storage as round_storage

from automem_dagster.llm.client import EndpointError
from automem_dagster.loop.report import batch_span_ms
from automem_dagster.loop.settings import Gate
from automem_dagster.rollout import RolloutError
from automem_dagster.rollout.trajectory import finished_episodes, read_trajectory
from automem_dagster.tracking import Tracker

storage = round_storage  # the scratch scaffolds, runs and lineage of these rounds (structure_round_rules.py)


def test_a_winning_revision_is_kept_and_tracked(storage, scripted, tmp_path):
    server = scripted(meta_rules(storage, patch_reply("WIN-MARKER")) + GAME_RULES)
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", artifact_root=tmp_path / "artifacts")
    result, report = run(storage, server, tracker)

    assert result.outcome == "kept" and result.candidate == 1
    assert result.decision.champion_before == 0 and result.decision.champion_after == 1
    assert result.candidate_eval.progression.mean > result.champion_eval.progression.mean == 0.0
    lineage = storage.load_lineage("crafter")
    assert lineage.champion().version == 1
    record = lineage.record(1)
    assert record.decision == "kept" and record.evaluation.seeds == [42, 43] and record.diagnosis
    assert (storage.scaffolds / "crafter" / "v1.yaml").exists()
    # The diagnosis kept the finding citing a real step and dropped the invented episode.
    diagnosis = json.loads((result.diagnosis_dir / "diagnosis.json").read_text())
    assert len(diagnosis["findings"]) == 1 and "no episode 'crafter__seed1'" in diagnosis["dropped"][0]["reason"]
    assert "stuck.enabled False -> True" in (result.revision_dir / "diff.md").read_text()
    # MLflow: one run per evaluated version, the candidate's carrying the decision and the diff.
    runs = {r["role"]: r for r in tracker.runs_for("crafter")}
    assert runs["candidate"]["decision"] == "kept" and runs["candidate"]["version"] == 1
    assert runs["champion"]["version"] == 0
    artifacts = {a.path for a in tracker.client.list_artifacts(report.runs["candidate"].run_id)}
    assert {"diff.md", "diagnosis.md", "decision.json"} <= artifacts
    assert report.plots["progression"].read_bytes()[:4] == b"\x89PNG"
    # The run's times are the batch's: its first episode's start and its last one's end.
    info = tracker.client.get_run(report.runs["candidate"].run_id).info
    assert (info.start_time, info.end_time) == batch_span_ms(result.candidate_eval.out_dir)
    first = read_trajectory(finished_episodes(result.candidate_eval.out_dir)[0])[0]["started_at"]
    assert info.start_time <= datetime.fromisoformat(first).timestamp() * 1000 < info.end_time
    # The decision file says which gate decided, how each side's requests were seeded and what gain it
    # could have seen on its 2 seeds.
    stored = json.loads((storage.runs / "decisions" / "crafter" / "v1.json").read_text())
    assert stored["gate"] == {"rule": "higher_mean", "level": 0.05, "min_seeds": 5, "metric": None, "margin": 0.1,
                              "min_gain": 5.0}
    assert stored["detectable"]["n"] == 2 and stored["detectable"]["level"] == 0.5
    assert "2 seeds" in stored["detectable"]["summary"] and stored["metric"] == {}
    assert set(stored["sampling"]) == {"candidate", "champion"}
    assert stored["sampling"]["candidate"]["game"].startswith("best effort")


def test_the_significant_gate_calls_a_win_on_too_few_seeds_inconclusive(storage, scripted):
    server = scripted(meta_rules(storage, patch_reply("WIN-MARKER")) + GAME_RULES)
    significant = SETTINGS.model_copy(update={"gate": Gate(rule="significant", level=0.05, min_seeds=5)})
    result, _ = run(storage, server, settings=significant)
    assert result.candidate_eval.progression.mean > result.champion_eval.progression.mean
    assert result.outcome == "inconclusive" and "on 2 seeds" in result.decision.reason
    assert result.decision.gate["rule"] == "significant" and result.decision.inconclusive
    assert storage.load_lineage("crafter").record(1).decision == "inconclusive"
    assert storage.load_lineage("crafter").champion().version == 0


def test_the_equal_score_gate_keeps_a_tie_that_reads_fewer_prompt_tokens(storage, scripted):
    """A patch that drops two memory files plays exactly as its parent (noop) with a shorter prompt on
    every turn: the paper's rule calls it a tie, the equal_score gate on input tokens keeps it (2 seeds
    reach p 0.25 at best and the token route tests at half the level, so this round's level is 0.6)."""
    shorter = json.dumps({"remove_files": ["survival_log.txt", "actions_log.txt"],
                          "rationale": "Finding 1: the agent idles; two files it never reads only lengthen the prompt."})
    server = scripted(meta_rules(storage, shorter) + GAME_RULES)
    cheaper = Gate(rule="equal_score", level=0.6, min_seeds=2, metric="input_tokens_per_step", margin=0.1)
    result, _ = run(storage, server, settings=SETTINGS.model_copy(update={"gate": cheaper}))
    assert result.candidate_eval.progression.mean == result.champion_eval.progression.mean
    assert result.outcome == "kept" and "input_tokens_per_step lower" in result.decision.reason
    metric = result.decision.metric
    assert metric["metric"] == "input_tokens_per_step" and metric["p_value"] == 0.25
    assert metric["candidate_mean"] < metric["champion_mean"] == pytest.approx(
        result.champion_eval.behaviour.input_tokens_per_step)
    assert storage.load_lineage("crafter").champion().version == 1


def test_a_tying_revision_is_inconclusive(storage, scripted):
    server = scripted(meta_rules(storage, patch_reply()) + GAME_RULES)
    result, _ = run(storage, server)
    assert result.outcome == "inconclusive"
    assert "inside the noise floor" in result.decision.reason and "the champion stays" in result.decision.reason
    # What the demo prints beside such a tie: these seeds cannot say what gain would show, and a budget that can.
    from automem_dagster.commands.demo import what_a_decision_needs

    said = what_a_decision_needs(result, SETTINGS)
    assert "smallest detectable gain unknown" in said and "every seed scored the same on both sides (0.00%)" in said
    assert said.endswith("automem rounds --game crafter --meta rules --gate significant")
    lineage = storage.load_lineage("crafter")
    assert lineage.champion().version == 0 and lineage.record(1).decision == "inconclusive"


def test_an_invalid_revision_is_rejected_with_its_reason(storage, scripted):
    bad = [json.dumps({"remove_files": ["nope.txt"], "rationale": "Finding 1 says the file nope.txt misleads it."}),
           "not json at all",
           json.dumps({"rationale": "Only wording changes here, nothing structural at all."})]
    server = scripted(meta_rules(storage, bad) + GAME_RULES)
    result, _ = run(storage, server)
    assert result.outcome == "rejected" and result.candidate is None
    errors = [a.error for a in result.revision.attempts]
    assert "unknown files ['nope.txt']" in errors[0] and "not valid JSON" in errors[1] and "wording only" in errors[2]
    saved = json.loads((result.revision_dir / "revision.json").read_text())
    assert saved["rejected_reason"].startswith("no valid revision in 3 attempts")
    lineage = storage.load_lineage("crafter")
    assert [r.version for r in lineage.versions] == [0] and lineage.champion().version == 0
    assert not (storage.scaffolds / "crafter" / "v1.yaml").exists()


def test_a_meta_without_a_usable_diagnosis_ends_the_round_without_a_candidate(storage, scripted):
    """Malformed diagnoses in every attempt (the embedded 135M meta on key and door cited steps it was never
    shown, 3 times in 3): the round makes no candidate and finishes, where it failed with a stack trace."""
    server = scripted([{"match": "Diagnose this batch", "reply": "not a diagnosis"}, *GAME_RULES])
    result, _ = run(storage, server)
    assert result.outcome == "rejected" and result.candidate is None and result.decision is None
    assert any("no usable diagnosis in 3 attempts" in note for note in result.notes), result.notes
    lineage = storage.load_lineage("crafter")
    assert [r.version for r in lineage.versions] == [0] and lineage.champion().version == 0


def test_a_failure_halfway_leaves_the_champion_and_the_next_round_finishes_it(storage, scripted):
    failing = scripted(meta_rules(storage, patch_reply("WIN-MARKER FAIL-MARKER")) + GAME_RULES)
    with pytest.raises((EndpointError, RolloutError)):
        run(storage, failing)
    lineage_file = storage.lineage / "crafter.json"
    before = lineage_file.read_bytes()
    lineage = storage.load_lineage("crafter")          # still a valid file
    assert lineage.champion().version == 0 and lineage.record(1).decision is None

    healed = scripted([r for r in GAME_RULES if r.get("match") != "FAIL-MARKER"])
    result, _ = run(storage, healed)
    assert "resumed pending candidate v1" in result.notes[0] and result.revision is None
    assert result.outcome == "kept" and storage.load_lineage("crafter").champion().version == 1
    assert lineage_file.read_bytes() != before


def test_lineage_command_shows_the_tree(storage, scripted, monkeypatch, capsys):
    from automem_dagster import cli
    from automem_dagster.commands import shared

    server = scripted(meta_rules(storage, patch_reply("WIN-MARKER")) + GAME_RULES)
    run(storage, server)
    monkeypatch.setattr(shared, "STORAGE", storage)
    assert cli.main(["lineage", "--game", "crafter"]) == 0
    out = capsys.readouterr().out
    assert "v1  kept" in out and "[champion]" in out and "champion: v1 since" in out
    assert cli.main(["lineage", "--game", "minihack"]) == 0          # a family name, no task needed
    assert "v0  baseline" in capsys.readouterr().out
    assert cli.main(["lineage", "--game", "chess"]) == 2


def test_the_reused_champion_batch_is_logged_once_and_linked(storage, scripted, tmp_path):
    """Two rounds tie against champion v0 on the same seeds: its evaluation batch is played once
    (reused) and so logged once; the second round's candidate run links that run by tag."""
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", artifact_root=tmp_path / "artifacts")
    _, first = run(storage, scripted(meta_rules(storage, patch_reply()) + GAME_RULES), tracker)
    # The second round diagnoses fresh training seeds: a meta-LLM whose diagnosis cites those, and a patch
    # other than the first (the same one would be v1 again, rejected before it is played).
    second_result, second = run(storage, scripted(meta_rules(storage, patch_reply("again")) + GAME_RULES), tracker)
    assert second_result.outcome == "inconclusive" and second_result.candidate == 2
    assert second.runs["champion"].run_id == first.runs["champion"].run_id
    rows = tracker.runs_for("crafter")
    assert [r["role"] for r in rows].count("champion") == 1 and [r["role"] for r in rows].count("candidate") == 2
    for report in (first, second):
        tags = tracker.client.get_run(report.runs["candidate"].run_id).data.tags
        assert tags["automem.champion_run"] == first.runs["champion"].run_id
    champion_tags = tracker.client.get_run(first.runs["champion"].run_id).data.tags
    assert champion_tags["automem.batch"] == str(second_result.champion_eval.out_dir)
