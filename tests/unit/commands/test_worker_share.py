"""The folders a worker on another host must share (``commands/worker_share.py``): ``--migrate`` marks them and
records them in the instance; a worker that does not see one at the recorded path is told which, and how to fix it."""

import dagster as dg
import pytest

from automem_dagster.commands.worker_share import (
    MARKER,
    ShareMissing,
    check_shared_folders,
    mark_shared_folders,
    shared_folders,
)
from automem_dagster.defs.resources import IO_BASE_ENV


@pytest.fixture
def instance(tmp_path, monkeypatch):
    monkeypatch.delenv(IO_BASE_ENV, raising=False)
    (tmp_path / "dagster_home").mkdir()
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        yield instance


def test_a_worker_that_sees_the_marked_folders_passes(instance, tmp_path):
    folders = mark_shared_folders(instance, tmp_path / "project")
    assert set(folders) == {"project home", "step outputs"}
    assert all((folder / MARKER).exists() for folder in folders.values())
    check_shared_folders(instance, tmp_path / "project")


def test_a_worker_without_the_share_is_told_each_folder_it_lacks(instance, tmp_path):
    folders = mark_shared_folders(instance, tmp_path / "project")
    for folder in folders.values():
        (folder / MARKER).unlink()
    with pytest.raises(ShareMissing) as raised:
        check_shared_folders(instance, tmp_path / "project")
    said = str(raised.value)
    assert f"project home: {tmp_path / 'project' / 'runs' / MARKER} is missing" in said
    assert f"step outputs: {folders['step outputs'] / MARKER} is missing" in said
    assert "Mount the share at the same paths" in said


def test_a_worker_with_another_project_home_is_told_the_runs_one(instance, tmp_path):
    mark_shared_folders(instance, tmp_path / "project")
    with pytest.raises(ShareMissing, match=f"set AUTOMEM_HOME={tmp_path / 'project'}"):
        check_shared_folders(instance, tmp_path / "elsewhere")


def test_a_folder_marked_by_an_older_migrate_is_not_the_share(instance, tmp_path):
    """Another folder at the same path (a local disk where the share should be mounted) holds an old token."""
    folders = mark_shared_folders(instance, tmp_path / "project")
    old = (folders["project home"] / MARKER).read_text()
    mark_shared_folders(instance, tmp_path / "project")
    (folders["project home"] / MARKER).write_text(old)
    with pytest.raises(ShareMissing, match="holds another token"):
        check_shared_folders(instance, tmp_path / "project")


def test_an_instance_never_migrated_says_to_migrate(instance, tmp_path):
    with pytest.raises(ShareMissing, match="run `automem worker --migrate` once"):
        check_shared_folders(instance, tmp_path / "project")


def test_step_outputs_in_object_storage_are_not_a_folder_to_check(instance, tmp_path, monkeypatch):
    monkeypatch.setenv(IO_BASE_ENV, "s3://bucket/automem-io")
    assert set(shared_folders(instance, tmp_path / "project")) == {"project home"}
    monkeypatch.setenv(IO_BASE_ENV, str(tmp_path / "io"))
    assert shared_folders(instance, tmp_path / "project")["step outputs"] == tmp_path / "io"
