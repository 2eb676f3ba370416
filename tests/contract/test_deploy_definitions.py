"""A job's step outputs go where ``AUTOMEM_IO_BASE`` says, a folder or an fsspec URL, in in-process
Dagster (the instance file's limits: tests/unit/defs/test_deploy_config.py)."""

import pickle

import dagster as dg
import pytest


@dg.asset
def handed_on() -> dict:
    """A value an asset hands to the next step, as the plans and shard results are."""
    return {"batch": "runs/rollouts/x", "seeds": [1, 2]}


@pytest.mark.parametrize("base", ["folder", "memory://automem-io"])
@pytest.mark.contract
def test_step_outputs_go_where_automem_io_base_says(tmp_path, monkeypatch, base):
    """``$AUTOMEM_IO_BASE`` moves the project's IO manager: a folder (a shared mount), or an fsspec URL
    opened as a UPath. fsspec's in-memory file system stands in for an object store here: it is
    reached through the same fsspec interface as s3fs or gcsfs (filesystem_spec docs, "Implementations")."""
    from upath import UPath

    from automem_dagster.defs.resources import IO_BASE_ENV, io_manager

    target = str(tmp_path / "shared-io") if base == "folder" else base
    monkeypatch.setenv(IO_BASE_ENV, target)
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        result = dg.materialize([handed_on], resources={"io_manager": io_manager()}, instance=instance)
        assert result.success
        [materialization] = result.asset_materializations_for_node("handed_on")
        assert materialization.metadata["path"].value == "handed_on"  # short: the page's value column holds it
    stored = UPath(target) / "handed_on"
    assert stored.exists() and not (tmp_path / "dagster_home" / "storage" / "handed_on").exists()
    assert pickle.loads(stored.read_bytes()) == {"batch": "runs/rollouts/x", "seeds": [1, 2]}
    monkeypatch.delenv(IO_BASE_ENV)
    assert io_manager().base_dir is None  # unset: the instance's storage directory, Dagster's default
