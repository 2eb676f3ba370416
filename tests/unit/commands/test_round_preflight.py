"""Every command that starts a whole round refuses bad settings before its Dagster run starts, with the one-line
message (rc 2) that ``automem evaluate`` gives: inside the run the same file failed a step, was retried three
times and ended in a stack trace two minutes later. Nothing here may reach a run: a check that let one start
would try to play (and fail, or hang on a server) instead of returning 2."""

import pytest

from automem_dagster.cli import main as cli_main
from automem_dagster.commands import shared

ROUND_COMMANDS = [["revise", "--no-tracking"], ["rounds", "--no-tracking", "--max-rounds", "1", "--patience", "1"],
                  ["train", "--no-tracking"]]


@pytest.fixture
def scratch_storage(tmp_path, monkeypatch, storage):
    monkeypatch.setattr(shared, "STORAGE", storage.storage())
    return tmp_path


@pytest.mark.parametrize("command", ROUND_COMMANDS, ids=lambda c: c[0])
def test_a_refused_endpoints_file_stops_a_round_before_it_starts(command, scratch_storage, capsys):
    bad = scratch_storage / "endpoints.yaml"
    bad.write_text("game:\n  base_url: not-a-url\n  model: [1, 2]\n")
    assert cli_main([*command, "--game", "crafter", "--endpoints", str(bad)]) == 2
    out = capsys.readouterr()
    assert f"endpoints file {bad}" in out.out + out.err
    assert "Traceback" not in out.out + out.err


@pytest.mark.parametrize("command", ROUND_COMMANDS, ids=lambda c: c[0])
def test_an_unknown_game_stops_a_round_before_it_starts(command, scratch_storage, capsys):
    assert cli_main([*command, "--game", "nosuch"]) == 2
    assert "unknown game 'nosuch'" in "".join(capsys.readouterr())


def test_an_invalid_champion_scaffold_stops_a_round_before_it_starts(scratch_storage, capsys):
    (scratch_storage / "scaffolds" / "crafter" / "v0.yaml").write_text("version: 0\nlog_prompt: [broken\n")
    assert cli_main(["revise", "--no-tracking", "--game", "crafter"]) == 2
    assert "v0.yaml" in "".join(capsys.readouterr())


def test_a_training_base_that_does_not_exist_stops_a_proficiency_round_before_it_starts(scratch_storage, capsys):
    """Inside the run the base is first read by the training step, after the rollouts and the curation."""
    missing = scratch_storage / "no-such-model"
    assert cli_main(["train", "--no-tracking", "--game", "crafter", "--base", str(missing)]) == 2
    assert f"cannot read the config of base model '{missing}'" in "".join(capsys.readouterr())


def test_rounds_refuse_a_bad_proficiency_setting_before_the_structure_rounds(scratch_storage, capsys):
    """``--proficiency``'s settings are read first: before, the structure rounds ran and then the refusal came."""
    assert cli_main(["rounds", "--no-tracking", "--game", "crafter", "--proficiency", "--min-examples", "0"]) == 2
    assert "fix --min-examples" in "".join(capsys.readouterr())


def test_a_dataset_minimum_of_one_is_refused_before_a_round_starts(scratch_storage, capsys):
    """Training holds one example out to validate on: a minimum of 1 let curation pass a dataset the trainer then
    refused, with a stack trace, after the whole round's replays (the demo did, at issue 53)."""
    assert cli_main(["train", "--no-tracking", "--game", "keydoor", "--min-examples", "1"]) == 2
    assert "fix --min-examples" in "".join(capsys.readouterr())


@pytest.mark.parametrize("command", ROUND_COMMANDS, ids=lambda c: c[0])
def test_a_bad_budget_stops_a_round_before_it_starts(command, scratch_storage, capsys):
    assert cli_main([*command, "--game", "crafter", "--rollout-episodes", "0"]) == 2
    assert "fix --rollout-episodes" in "".join(capsys.readouterr())
