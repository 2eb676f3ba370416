"""The scratch project ``automem rounds`` runs in during a test: copies of the shipped scaffolds, empty
runs, lineage and specialist folders, set as the commands' ``shared.STORAGE``. A pytest fixture: a test
file takes it as ``storage = cli_round_storage``."""

import shutil

import pytest

from automem_dagster.commands import shared
from automem_dagster.loop.storage import Storage
from automem_dagster.paths import SCAFFOLDS


@pytest.fixture
def storage(tmp_path, monkeypatch):
    scaffolds = tmp_path / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    store = Storage(runs=tmp_path / "runs", scaffolds=scaffolds, lineage=tmp_path / "lineage",
                    specialists=tmp_path / "specialists")
    monkeypatch.setattr(shared, "STORAGE", store)
    return store
