"""Damaged files get an answer that names the file, the line and what to do, and nothing is lost.

Every case starts from real files (a random-agent batch played by the CLI, a saved lineage, a
saved specialist registry), damages one the way a person or a crash might, and checks the error
and that the damaged file is still there byte for byte. docs/hostile_inputs.md lists the cases.
"""

from __future__ import annotations

import json
import shutil

import pytest

from automem_dagster.cli import main as cli_main
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.rollout import TrajectoryError, read_trajectory, summarize_batch
from automem_dagster.scaffold.lineage import Lineage, LineageError
from automem_dagster.training.registry import RegistryError, SpecialistRegistry


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """A finished two-episode batch of the random agent (no model needed), copied fresh per test."""
    out = tmp_path_factory.mktemp("played") / "batch"
    assert cli_main(["rollout", "--game", "minihack:Corridor-R3", "--agent", "random", "--seeds", "42,43",
                     "--rollout-max-steps", "4", "--out", str(out)]) == 0
    return out


@pytest.fixture
def batch(played, tmp_path):
    copy = tmp_path / "batch"
    shutil.copytree(played, copy)
    return copy


def first_trajectory(batch):
    return sorted((batch / "trajectories").glob("*.jsonl"))[0]


def rerun(batch):
    return cli_main(["rollout", "--game", "minihack:Corridor-R3", "--agent", "random", "--seeds", "42,43",
                     "--rollout-max-steps", "4", "--out", str(batch)])





def test_one_blank_line_at_the_end_of_a_trajectory_is_tolerated(batch):
    path = first_trajectory(batch)
    clean = read_trajectory(path)
    path.write_text(path.read_text() + "\n")
    assert read_trajectory(path) == clean
    assert summarize_batch(batch).episodes[0].steps == 4


def test_a_blank_line_inside_a_trajectory_is_corruption(batch):
    path = first_trajectory(batch)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2] + ["\n"] + lines[2:]))
    with pytest.raises(TrajectoryError, match=rf"{path.name} line 3 is not JSON .*rerun the same rollout"):
        read_trajectory(path)


def test_a_step_line_missing_keys_names_file_line_and_keys(batch):
    path = first_trajectory(batch)
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = json.dumps({"type": "step", "step": 0}) + "\n"
    damaged = "".join(lines)
    path.write_text(damaged)
    with pytest.raises(TrajectoryError, match=rf"{path.name} line 2 \(step 0\) lacks observation, action, "
                                              r"action_valid.*rerun the same rollout"):
        summarize_batch(batch)
    assert path.read_text() == damaged


def test_a_non_utf8_trajectory_names_file_byte_and_line(batch, capsys):
    path = first_trajectory(batch)
    data = path.read_bytes()
    second_line = data.index(b"\n") + 1
    damaged = data[:second_line + 5] + b"\xff" + data[second_line + 6:]
    path.write_bytes(damaged)
    with pytest.raises(TrajectoryError, match=rf"trajectory {path} is not UTF-8 text \(byte 0xff at offset "
                                              rf"{second_line + 5}, line 2\): delete it"):
        read_trajectory(path)
    # The CLI resumes the batch (finished episodes are skipped) and reports the damage instead of a traceback.
    assert rerun(batch) == 2
    assert f"{path.name} is not UTF-8" in " ".join(capsys.readouterr().err.split())
    assert path.read_bytes() == damaged





def test_a_garbage_batch_manifest_names_the_file_and_position(batch, capsys):
    manifest = batch / "batch.json"
    manifest.write_text("{game: crafter,")
    assert rerun(batch) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert f"batch manifest {manifest} is not valid JSON" in err and "line 1 column 2" in err
    assert manifest.read_text() == "{game: crafter,"


def test_a_missing_batch_manifest_says_what_a_batch_folder_is(batch, capsys):
    (batch / "batch.json").unlink()
    assert cli_main(["curate", "--game", "minihack:Corridor-R3", "--batch", str(batch)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "does not exist" in err and "is" in err and "a batch folder?" in err





@pytest.fixture
def lineage_dirs(tmp_path):
    scaffolds = tmp_path / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    root = tmp_path / "lineage"
    Lineage.load("crafter", root, scaffolds).save()
    return root, scaffolds


def test_a_non_utf8_lineage_file_names_the_file_and_the_fix(lineage_dirs):
    root, scaffolds = lineage_dirs
    path = root / "crafter.json"
    damaged = path.read_bytes().replace(b"baseline", b"basel\xffne", 1)
    path.write_bytes(damaged)
    with pytest.raises(LineageError, match=rf"lineage file {path} is not UTF-8 text \(byte 0xff .*line \d+\): "
                                           r"restore it from version control"):
        Lineage.load("crafter", root, scaffolds)
    assert path.read_bytes() == damaged


def test_a_directory_in_place_of_the_lineage_file_is_named_not_replaced(lineage_dirs):
    root, scaffolds = lineage_dirs
    path = root / "crafter.json"
    path.unlink()
    path.mkdir()
    (path / "keep.txt").write_text("someone's notes")
    with pytest.raises(LineageError, match=rf"lineage file {path} is a directory, not a file: move the directory aside"):
        Lineage.load("crafter", root, scaffolds)
    assert (path / "keep.txt").read_text() == "someone's notes"


def test_a_non_utf8_registry_names_the_file(tmp_path):
    path = tmp_path / "crafter.json"
    path.write_bytes(b'{"champion": "\xff"}')
    with pytest.raises(RegistryError, match=rf"specialist registry {path} is not UTF-8 text.*restore it"):
        SpecialistRegistry.load("crafter", tmp_path)
