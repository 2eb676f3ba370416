"""Endpoint files: the shipped one loads, a bad one names its file and field, a missing key variable
is named; the clients each role gets, cached prompt tokens, the embedded server's threads."""

import asyncio
import os

import pytest

from automem_dagster.llm import (
    EndpointConfig,
    EndpointConfigError,
    load_endpoints,
)
from automem_dagster.paths import DEFAULT_ENDPOINTS


def test_shipped_endpoints_config_loads():
    config = load_endpoints(DEFAULT_ENDPOINTS)
    assert config.uses_embedded() and not config.two_model and config.game.constrained == "gbnf"


def test_bad_config_names_file_and_field(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("game: {name: g, temperature: 9}\n")
    with pytest.raises(EndpointConfigError, match=r"e\.yaml.*game\.temperature"):
        load_endpoints(path)
    with pytest.raises(EndpointConfigError, match="does not exist"):
        load_endpoints(tmp_path / "missing.yaml")


def test_missing_key_variable_is_named(monkeypatch):
    monkeypatch.delenv("AUTOMEM_TEST_KEY", raising=False)
    cfg = EndpointConfig(name="meta", base_url="http://127.0.0.1:1/v1", api_key_env="AUTOMEM_TEST_KEY")
    with pytest.raises(EndpointConfigError, match=r"\$AUTOMEM_TEST_KEY"):
        cfg.api_key()


def test_the_memory_role_gets_a_client_only_for_a_specialist_evaluation(tmp_path):
    """A file naming a ``memory:`` endpoint (the specialist's server) must not turn the structure loop's
    or the training rollouts' one-model agent into a two-model one."""
    from automem_dagster.llm.config import EndpointsConfig
    from automem_dagster.llm.session import connect

    config = EndpointsConfig(game=EndpointConfig(name="game", base_url="http://127.0.0.1:9/v1"),
                             memory=EndpointConfig(name="memory", base_url="http://127.0.0.1:9/v1", model="specialist"))

    async def clients(two_model):
        async with connect(config, tmp_path, two_model=two_model) as c:
            return c.memory is not None

    assert asyncio.run(clients(False)) is False
    assert asyncio.run(clients(True)) is True


def test_cached_prompt_tokens_are_read_from_what_the_server_says():
    """OpenAI and vLLM report ``usage.prompt_tokens_details.cached_tokens``; llama.cpp's server adds
    ``timings`` with ``cache_n`` (tools/server/README.md); a server that says neither gives None."""
    from automem_dagster.llm.client import cached_tokens

    base = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}]}
    usage = {"prompt_tokens": 900, "completion_tokens": 5, "total_tokens": 905}
    openai_style = {**base, "usage": {**usage, "prompt_tokens_details": {"cached_tokens": 768}}}
    llama = {**base, "usage": usage, "timings": {"cache_n": 795, "prompt_n": 105}}
    silent = {**base, "usage": usage}
    assert [cached_tokens(r) for r in (openai_style, llama, silent)] == [768, 795, None]


def test_embedded_server_threads_follow_the_environment(tmp_path, monkeypatch):
    """A worker's share of the cores (conftest under pytest-xdist, or a person sharing the machine) reaches
    the server's command line; a bad value names the variable instead of starting a server."""
    from automem_dagster.llm.embedded_server import embedded_server

    def threads() -> str:
        command = embedded_server(tmp_path / "server.log").command
        return command[command.index("--threads") + 1]

    monkeypatch.setenv("AUTOMEM_EMBEDDED_THREADS", "1")
    assert threads() == "1"
    monkeypatch.delenv("AUTOMEM_EMBEDDED_THREADS")
    assert threads() == str(min(os.cpu_count() or 2, 8))
    monkeypatch.setenv("AUTOMEM_EMBEDDED_THREADS", "two")
    with pytest.raises(ValueError, match="AUTOMEM_EMBEDDED_THREADS='two'"):
        threads()


def test_training_threads_are_refused_the_same_way(monkeypatch):
    """LoRA training reads its share through the same rule: a bad value names its variable."""
    from automem_dagster.training.base_model import configure_torch_threads

    monkeypatch.setenv("AUTOMEM_TORCH_THREADS", "two")
    with pytest.raises(ValueError, match="AUTOMEM_TORCH_THREADS='two'"):
        configure_torch_threads()
