"""A round the CLI runs is a Dagster run in the project's instance: every step materialized, the gate checked.

The round is ``automem revise``'s own function (``commands.structure.structure_round``) against
one scripted server (the rules of dagster_round_rules: a patch adding ``WIN-MARKER`` wins, one
without a structural change is rejected). Afterwards the instance under ``$DAGSTER_HOME`` is
queried through Dagster's Python API: the run (its job, its tag), each asset's materialization in
it, the ``evaluation_gate`` result, the ``scaffold_versions`` partitions, and the sensors, which
leave a round that decided itself, and that the CLI chains, alone. ``automem train``'s round is read back
the same way (``cli_round_records``) in tests/e2e/test_ui_pages.py, from the demo's rounds.
"""

import json

import dagster as dg
from builders import whole
from cli_round_records import SETTINGS, endpoints_file, latest, one_cli_run
from dagster_round_rules import GAME_RULES, meta_rules, winning_patch

from automem_dagster.commands import shared
from automem_dagster.commands.structure import structure_round
from automem_dagster.defs import defs
from automem_dagster.defs.structure.sensors import evaluation_gate_sensor, next_round_sensor

STRUCTURE_ASSETS = ["rollout_batch", "diagnosis", "scaffold_candidate", "candidate_evaluation", "champion_scaffold"]


def cli_round(tmp_path, monkeypatch, storage, server) -> dg.DagsterInstance:
    """One ``automem revise`` round on ``server``; returns the instance it reported to (conftest
    points ``$DAGSTER_HOME`` at ``tmp_path / "dagster_home"``)."""
    monkeypatch.setattr(shared, "STORAGE", storage.storage())
    structure_round(SETTINGS, endpoints_file(tmp_path, server), tracker=None)
    return dg.DagsterInstance.from_config(str(tmp_path / "dagster_home"))


def gate_evaluation(instance: dg.DagsterInstance):
    key = dg.AssetCheckKey(dg.AssetKey("candidate_evaluation"), "evaluation_gate")
    [record] = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
    return record.event.dagster_event.event_specific_data


def test_a_cli_round_is_one_dagster_run_with_every_asset_and_the_gate(tmp_path, monkeypatch, storage, scripted):
    server = scripted(meta_rules(storage, [winning_patch()]) + GAME_RULES)
    with cli_round(tmp_path, monkeypatch, storage, server) as instance:
        one_cli_run(instance, STRUCTURE_ASSETS, "structure_full_round_job")
        shown = {asset: latest(instance, asset) for asset in STRUCTURE_ASSETS}
        assert shown["rollout_batch"]["episodes"] == 2 and shown["diagnosis"]["findings"] == 1
        assert shown["scaffold_candidate"]["outcome"] == "accepted"
        assert "stuck.enabled False -> True" in shown["scaffold_candidate"]["diff_full"]  # long: one click away
        evaluation = shown["candidate_evaluation"]
        assert evaluation["outcome"] == "evaluated" and evaluation["candidate"] == "v1"
        assert evaluation["candidate_mean"] > evaluation["champion_mean"] == 0.0
        assert "data:image/png;base64," in evaluation["behaviour_plot"] and "± " in whole(evaluation, "progression")
        champion = shown["champion_scaffold"]
        assert champion["decision"] == "kept" and (champion["champion_before"], champion["champion_after"]) == (0, 1)
        assert "data:image/png;base64," in champion["progression_by_version"]
        # the round measured the champion's noise floor (none was stored) and says how the champion was played
        assert whole(champion, "noise_floor").startswith("noise floor ") and champion["champion_play"] != "not recorded"

        gate = gate_evaluation(instance)
        assert gate.passed and gate.partition == "crafter" and gate.metadata["would"].value == "keep"
        assert "kept" in gate.metadata["reason"].value

        # Both versions are partitions, each materialized with its YAML and fate.
        assert instance.get_dynamic_partitions("scaffold_versions") == ["crafter-v0", "crafter-v1"]
        v1 = latest(instance, "scaffold_version", "crafter-v1")
        assert v1["decision"] == "kept" and v1["champion"] is True and "WIN-MARKER" in v1["scaffold_full"]
        assert latest(instance, "scaffold_version", "crafter-v0")["champion"] is False

        # The run decided already: the gate sensor starts no promotion for it; and the CLI chains its own
        # rounds, so the (opt-in) next-round sensor starts none after its keep either.
        tick = evaluation_gate_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
        assert tick.run_requests == []
        tick = next_round_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
        assert tick.run_requests == []


def test_a_rejected_cli_round_shows_why_and_a_passing_gate(tmp_path, monkeypatch, storage, scripted):
    bad = ["not json at all", json.dumps({"rationale": "Only wording changes here, nothing structural at all."})]
    server = scripted(meta_rules(storage, bad) + GAME_RULES)
    with cli_round(tmp_path, monkeypatch, storage, server) as instance:
        one_cli_run(instance, STRUCTURE_ASSETS, "structure_full_round_job")
        candidate = latest(instance, "scaffold_candidate")
        assert candidate["outcome"] == "rejected" and candidate["reason"].startswith("no valid revision in 3 attempts")
        assert latest(instance, "candidate_evaluation")["outcome"] == "no candidate"
        assert latest(instance, "champion_scaffold")["decision"] == "no candidate"
        gate = gate_evaluation(instance)
        assert gate.passed and gate.metadata["would"].value == "nothing to decide"
        assert instance.get_dynamic_partitions("scaffold_versions") == ["crafter-v0"]
