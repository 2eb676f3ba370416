"""One embedded server per run: a whole CLI round asks the embedded model in its rollout and its evaluation,
and the rules meta asks none, so the round starts the packaged model once (issue 43, point 3). Before the
run-scoped ``ServerPool`` every step that connected started its own server: the rollout, the diagnosis and
the revision (both with the rules meta), and each evaluation shard."""

import asyncio

import pytest

from automem_dagster import cli
from automem_dagster.commands import shared
from automem_dagster.llm.config import EndpointConfig, EndpointsConfig, RulesMeta
from automem_dagster.llm.session import ServerPool, connect

STARTED = "embedded model server listening on"
"""What the embedded server prints once it serves (``llm/embedded_server.serve``): one line per start,
appended to ``<runs>/logs/embedded_server.log``."""


@pytest.fixture
def store(storage, monkeypatch):
    """The CLI's storage on conftest's scratch project."""
    monkeypatch.setattr(shared, "STORAGE", storage.storage())
    return shared.STORAGE


@pytest.mark.server
def test_a_whole_round_with_the_rules_meta_starts_the_embedded_server_once(store):
    """The real packaged model (SmolLM2-135M on llama.cpp): 1 training episode and 1 evaluation seed of 2 steps."""
    assert cli.main(["rounds", "--game", "crafter", "--max-rounds", "1", "--patience", "1", "--rollout-episodes", "1",
                     "--rollout-max-steps", "2", "--eval-episodes", "1", "--eval-max-steps", "2", "--meta", "rules",
                     "--no-tracking"]) == 0
    log = (store.runs / "logs" / "embedded_server.log").read_text()
    assert log.count(STARTED) == 1


@pytest.mark.server
def test_a_pool_starts_one_server_per_model_and_a_meta_only_step_on_the_rules_meta_none(tmp_path):
    config = EndpointsConfig(game=EndpointConfig(name="game"), meta=RulesMeta(kind="rules"))
    pool = ServerPool()

    async def twice():
        async with connect(config, tmp_path, servers=pool, roles=("meta",)) as clients:
            assert clients.game is None and clients.rules_meta is not None
        assert pool.starts == 0
        for _ in range(2):
            async with connect(config, tmp_path, servers=pool) as clients:
                assert clients.game is not None
        url = clients.game.base_url
        assert pool.starts == 1
        return url

    try:
        url = asyncio.run(twice())
    finally:
        pool.close()
    assert (tmp_path / "embedded_server.log").read_text().count(STARTED) == 1
    assert url.startswith("http://127.0.0.1:")
