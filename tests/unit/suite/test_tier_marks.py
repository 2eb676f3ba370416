"""The ``server`` marker and the three tiers (setup.cfg): ``server`` on every test that starts a server process, so that
``pytest -m "not server"`` runs a subset that starts none (tests/conftest.py sets and enforces it)."""

import sys

import pytest
from conftest import SERVER_FIXTURES

from automem_dagster.llm.process import ServerProcess, free_port


def test_every_selected_test_that_uses_a_server_fixture_is_marked(request):
    unmarked = [item.nodeid for item in request.session.items
                if SERVER_FIXTURES & set(item.fixturenames) and item.get_closest_marker("server") is None]
    assert unmarked == []


def test_an_unmarked_test_that_starts_a_server_fails_naming_the_marker(tmp_path):
    server = ServerProcess([sys.executable, "-c", "pass"], free_port(), tmp_path / "probe.log", "probe")
    with pytest.raises(pytest.fail.Exception, match="starts a server process \\(probe\\) but is not marked `server`"):
        server.start()
    assert server.process is None  # refused before anything ran


def test_every_selected_test_is_in_exactly_one_tier(request):
    from conftest import TIERS

    counts = {item.nodeid: sum(item.get_closest_marker(t) is not None for t in TIERS) for item in request.session.items}
    assert {n: c for n, c in counts.items() if c != 1} == {}


def test_a_test_in_a_tier_folder_is_of_that_tier(request):
    from conftest import TESTS, folder_tier, tier

    assert folder_tier(TESTS / "unit" / "memory" / "test_memory.py") == "unit"
    assert folder_tier(TESTS / "e2e" / "test_dvc.py") == "e2e" and folder_tier(TESTS / "test_llm.py") is None
    misplaced = [item.nodeid for item in request.session.items if folder_tier(item.path) not in (None, tier(item))]
    assert misplaced == []


def test_a_unit_test_that_starts_a_subprocess_or_opens_a_socket_fails_naming_the_tier(request):
    import socket
    import subprocess

    assert request.node.get_closest_marker("unit") is not None
    with pytest.raises(pytest.fail.Exception, match="is in the unit tier but starts a subprocess"):
        subprocess.run([sys.executable, "-c", "pass"])
    with socket.socket() as sock, pytest.raises(pytest.fail.Exception, match="is in the unit tier but opens a socket"):
        sock.connect(("127.0.0.1", free_port()))
