"""A fresh project home copies the assets again and keeps its runs, and cannot be the project it copies
(``loop/storage.py``)."""

import pytest

from automem_dagster.loop.storage import Storage, fresh_project_home
from automem_dagster.paths import ASSETS


def test_a_fresh_home_copies_the_assets_again_and_keeps_its_runs(tmp_path):
    home = tmp_path / "demo"
    storage = fresh_project_home(home, ASSETS)
    assert storage == Storage.under(home)
    assert (storage.scaffolds / "crafter" / "v0.yaml").read_text() == (ASSETS / "scaffolds" / "crafter" / "v0.yaml").read_text()
    (storage.scaffolds / "crafter" / "v1.yaml").write_text("a candidate of an earlier demo")
    (storage.runs / "rollouts").mkdir(parents=True)
    fresh_project_home(home, ASSETS)
    assert not (storage.scaffolds / "crafter" / "v1.yaml").exists()
    assert (storage.runs / "rollouts").is_dir()


def test_a_home_cannot_be_the_project_it_copies(tmp_path):
    with pytest.raises(ValueError, match="separate folder"):
        fresh_project_home(ASSETS.parent, ASSETS)
