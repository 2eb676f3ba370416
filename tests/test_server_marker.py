"""The ``server`` marker (setup.cfg): on every test that starts a server process, so that
``pytest -m "not server"`` runs a subset that starts none (tests/conftest.py sets and enforces it)."""

import sys

import pytest
from conftest import SERVER_FIXTURES

from automem_dagster.llm.process import ServerProcess, free_port


def test_every_selected_test_that_uses_a_server_fixture_is_marked(request):
    unmarked = [item.nodeid for item in request.session.items
                if SERVER_FIXTURES & set(item.fixturenames) and item.get_closest_marker("server") is None]
    assert unmarked == []


def test_a_test_using_the_scripted_factory_is_marked_even_before_it_starts_one(request, scripted):
    assert request.node.get_closest_marker("server") is not None


def test_an_unmarked_test_that_starts_a_server_fails_naming_the_marker(tmp_path):
    server = ServerProcess([sys.executable, "-c", "pass"], free_port(), tmp_path / "probe.log", "probe")
    with pytest.raises(pytest.fail.Exception, match="starts a server process \\(probe\\) but is not marked `server`"):
        server.start()
    assert server.process is None  # refused before anything ran
