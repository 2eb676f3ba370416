"""A Celery worker started without its broker names it and exits 3 (the unit checks of the Celery
options: tests/unit/defs/test_celery_options.py)."""

import socket

import pytest

from automem_dagster import cli


@pytest.mark.contract
def test_a_worker_without_its_broker_names_it_and_exits_3(tmp_path, monkeypatch, capsys):
    pytest.importorskip("dagster_celery", reason="the celery extra is not installed")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert cli.main(["worker", "--migrate"]) == 0
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert cli.main(["worker", "--broker", f"redis://127.0.0.1:{port}/0"]) == 3
    assert f"broker: cannot reach the broker at redis://127.0.0.1:{port}/0" in " ".join(capsys.readouterr().err.split())
