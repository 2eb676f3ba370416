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


def test_a_test_using_the_scripted_factory_is_marked_even_before_it_starts_one(request, scripted):
    assert request.node.get_closest_marker("server") is not None


def test_an_unmarked_test_that_starts_a_server_fails_naming_the_marker(tmp_path):
    server = ServerProcess([sys.executable, "-c", "pass"], free_port(), tmp_path / "probe.log", "probe")
    with pytest.raises(pytest.fail.Exception, match="starts a server process \\(probe\\) but is not marked `server`"):
        server.start()
    assert server.process is None  # refused before anything ran


def test_every_selected_test_is_in_exactly_one_tier(request):
    from conftest import TIERS

    counts = {item.nodeid: sum(item.get_closest_marker(t) is not None for t in TIERS) for item in request.session.items}
    assert {n: c for n, c in counts.items() if c != 1} == {}


def test_the_tier_follows_the_fixtures_a_test_uses(request, scripted):
    from conftest import tier

    assert tier(request.node) == "contract"
    assert all(tier(item) == "e2e" for item in request.session.items if "embedded" in item.fixturenames)


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


def test_a_pooled_scripted_server_answers_from_reloaded_rules_with_fresh_counters(scripted, tmp_path):
    """``scripted`` reuses this worker's idle servers (``POST /scripted/reload``): a reload must leave
    nothing of the last test behind: rules, ``times`` counters, provider, request log."""
    import json
    import urllib.error
    import urllib.request

    from conftest import _reload

    def say(server, **extra) -> tuple[int, str]:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}], **extra}).encode()
        request = urllib.request.Request(f"{server.base_url}/chat/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request) as resp:
                return resp.status, json.loads(resp.read())["choices"][0]["message"]["content"]
        except urllib.error.HTTPError as refused:
            return refused.code, ""

    rules = [{"match": "go", "reply": "first", "times": 1}, {"match": "", "reply": "later"}]
    server = scripted(rules, {"models": ["m"]})
    assert [say(server), say(server), say(server, model="other")] == [(200, "first"), (200, "later"), (404, "")]
    _reload(server, rules, None, tmp_path / "next.jsonl")
    assert [say(server), say(server, model="other")] == [(200, "first"), (200, "later")]
    assert len(server.request_log.read_text().splitlines()) == 3 and len((tmp_path / "next.jsonl").read_text().splitlines()) == 2
