"""``automem table``: the paper's behaviour table, v0 against the final champion on real Crafter
episodes, after a round a scripted model wins (``WIN-MARKER`` in the plan prompt makes it play ``do``)."""

import json

import dagster as dg
import pytest
from builders import endpoints_file
from structure_round_rules import GAME_RULES, meta_rules, patch_reply, run
from structure_round_rules import storage as round_storage

from automem_dagster import cli
from automem_dagster.commands import shared
from automem_dagster.commands.table import log_table
from automem_dagster.loop.paper_table import PaperTable, TableRow
from automem_dagster.tracking import Tracker

storage = round_storage  # the same scratch scaffolds, runs and lineage as the rounds this table follows


def test_the_table_compares_v0_with_the_final_champion_and_shows_everywhere(storage, scripted, tmp_path, monkeypatch,
                                                                           capsys):
    server = scripted(meta_rules(storage, patch_reply("WIN-MARKER")) + GAME_RULES)
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", server, ("game",))
    monkeypatch.setattr(shared, "STORAGE", storage)
    args = ["table", "--game", "crafter", "--eval-episodes", "2", "--eval-max-steps", "10", "--endpoints",
            str(endpoints), "--no-tracking"]
    assert cli.main(args) == 2 and "still v0" in capsys.readouterr().err
    result, _ = run(storage, server)
    assert result.outcome == "kept"
    assert cli.main(args) == 0
    [saved] = (storage.runs / "reports" / "crafter").glob("paper-table-v0-v1-steps10-n2.json")
    table = json.loads(saved.read_text())
    rows = {r["metric"]: r for r in table["rows"]}
    assert list(rows) == ["progression", "input_tokens_per_step", "unproductive_action_rate", "redundant_write_rate",
                          "empty_search_rate"]
    progression = rows["progression"]
    assert progression["first"] == 0.0 and progression["final"] == pytest.approx(result.candidate_eval.progression.mean)
    assert progression["relative_change"] is None and rows["input_tokens_per_step"]["paper"] == "-3% to -30%"
    # v1's evaluation from the round is reused, not played again: the table reads the same batch.
    assert table["final_batch"] == result.candidate_eval.out_dir
    assert (storage.runs / "reports" / "crafter" / "paper-table-v0-v1-steps10-n2.png").read_bytes()[:4] == b"\x89PNG"
    instance = dg.DagsterInstance.from_config(str(tmp_path / "dagster_home"))
    [record] = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("champion_scaffold"),
                                                                 asset_partitions=["crafter"]), limit=1).records
    shown = record.asset_observation.metadata
    assert "| progression | 0 |" in shown["paper_table"].value and shown["final"].value == "v1"
    # MLflow: every cell a metric of one run, in the family's tables experiment.
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", artifact_root=tmp_path / "artifacts")
    logged = log_table(tracker, PaperTable(**{**table, "rows": [TableRow(**r) for r in table["rows"]]}))
    metrics = tracker.client.get_run(logged.run_id).data.metrics
    assert metrics["progression.final"] == pytest.approx(progression["final"])
    assert "progression.relative_change" not in metrics and "input_tokens_per_step.p_value" in metrics

    # --final names the compared version instead of the champion (a rolled-back candidate's table): here v0
    # against v1 the other way round, from the same two batches, played again by nobody.
    assert cli.main([*args, "--first", "1", "--final", "1"]) == 2 and "both name v1" in capsys.readouterr().err
    assert cli.main([*args, "--first", "1", "--final", "0"]) == 0
    reverse = json.loads((storage.runs / "reports" / "crafter" / "paper-table-v1-v0-steps10-n2.json").read_text())
    assert (reverse["first_batch"], reverse["final_batch"]) == (table["final_batch"], table["first_batch"])
    assert reverse["rows"][0]["difference"] == pytest.approx(-progression["difference"])
