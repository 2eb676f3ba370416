"""Where the dequantized training base is kept (``training/base_model.base_cache_root``): the project's
own variable wins, then XDG's cache home, then ``~/.cache``."""

from pathlib import Path

from automem_dagster.training.base_model import base_cache_root


def test_the_cache_root_follows_automem_cache_dir_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("AUTOMEM_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert base_cache_root() == tmp_path / "home" / ".cache" / "automem_dagster"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert base_cache_root() == tmp_path / "xdg" / "automem_dagster"
    monkeypatch.setenv("AUTOMEM_CACHE_DIR", str(tmp_path / "mine"))
    assert base_cache_root() == Path(tmp_path / "mine")
