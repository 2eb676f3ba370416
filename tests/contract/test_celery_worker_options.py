"""The Celery options as a user meets them before any worker runs: a round's bad ``--shards`` or
``--visibility-timeout`` refused by name, a worker that cannot reach its instance or its broker saying
which and exiting 3, a worker's ``--config-yaml`` read or refused by name, ``--migrate`` warning of a
``game_endpoint`` pool that plays one shard at a time, and how often workers look for the shards of a
lost worker."""

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
