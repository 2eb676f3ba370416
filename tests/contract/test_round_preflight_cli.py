"""``automem revise``, ``rounds`` and ``train`` as a person runs them, in a fresh interpreter: an endpoints file in
a refused form ends the command with ``evaluate``'s one-line message and rc 2, before any Dagster run starts
(no instance is opened: its home folder is never created) and before any server starts. Inside the run the same
file failed a step, was retried three times and ended in a stack trace two minutes later."""

import os
import subprocess
import sys

import pytest

ROUNDS = [["revise"], ["rounds", "--max-rounds", "1", "--patience", "1", "--proficiency"], ["train"]]


@pytest.mark.contract
@pytest.mark.parametrize("command", ROUNDS, ids=lambda c: c[0])
def test_a_refused_endpoints_file_ends_the_round_command_before_its_run(command, tmp_path):
    home, dagster_home = tmp_path / "home", tmp_path / "dagster_home"
    bad = tmp_path / "endpoints.yaml"
    bad.write_text("game:\n  base_url: not-a-url\n  model: [1, 2]\n")
    env = {**os.environ, "AUTOMEM_HOME": str(home), "DAGSTER_HOME": str(dagster_home)}
    done = subprocess.run([sys.executable, "-m", "automem_dagster.cli", *command, "--game", "crafter", "--no-tracking",
                           "--endpoints", str(bad)], env=env, capture_output=True, text=True, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "Traceback" not in said
    assert f"error: endpoints file {bad} is invalid: game.name: Field required" in " ".join(said.split())
    assert not dagster_home.exists()  # no Dagster instance was opened, so no run started
