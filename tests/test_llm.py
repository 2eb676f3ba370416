"""Endpoints: config validation, retries and clear errors against real local servers, no key leaks."""

import asyncio
import os

import pytest

from automem_dagster.llm import (
    EndpointConfig,
    EndpointConfigError,
    EndpointError,
    LLMClient,
    load_endpoints,
)
from automem_dagster.llm.process import free_port
from automem_dagster.paths import DEFAULT_ENDPOINTS


def _complete(client, messages=None, grammar=None):
    async def go():
        try:
            return await client.complete(messages or [{"role": "user", "content": "hi"}], grammar)
        finally:
            await client.close()

    return asyncio.run(go())


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


def test_scripted_reply_accounting_and_lora_body(scripted):
    server = scripted([{"match": "hi", "reply": "<|DONE|>"}])
    cfg = EndpointConfig(name="memory", base_url="unused", server="llama.cpp", constrained="none", lora_id=0)
    comp = _complete(LLMClient(cfg, server.base_url))
    assert comp.text == "<|DONE|>" and comp.attempts == 1
    assert comp.input_tokens >= 0 and comp.output_tokens == len("<|DONE|>") // 4 and comp.latency_s > 0


def test_transient_errors_are_retried_then_reported(scripted, monkeypatch):
    monkeypatch.setenv("AUTOMEM_SECRET", "sk-very-secret-value")
    server = scripted([{"match": "", "status": 503}])
    cfg = EndpointConfig(name="game", base_url="unused", max_retries=2, api_key_env="AUTOMEM_SECRET")
    with pytest.raises(EndpointError, match=r"'game' \(.*\) failed after 3 attempts") as err:
        _complete(LLMClient(cfg, server.base_url))
    assert "sk-very-secret-value" not in str(err.value)


@pytest.mark.contract
def test_connection_refused_is_a_clear_error():
    cfg = EndpointConfig(name="game", base_url="unused", max_retries=1, timeout_s=2)
    with pytest.raises(EndpointError, match="check that the server is running"):
        _complete(LLMClient(cfg, f"http://127.0.0.1:{free_port()}/v1"))


def test_client_errors_are_not_retried(scripted):
    server = scripted([{"match": "", "status": 400}])
    cfg = EndpointConfig(name="game", base_url="unused", max_retries=3)
    with pytest.raises(EndpointError, match="HTTP 400"):
        _complete(LLMClient(cfg, server.base_url))


@pytest.mark.integration
def test_embedded_server_honours_grammar(embedded):
    cfg = EndpointConfig(name="game", base_url="unused", server="llama.cpp", max_tokens=20)
    comp = _complete(LLMClient(cfg, embedded.base_url), grammar='root ::= "<|ACTION|>" ("noop" | "do") "<|END|>"')
    assert comp.text in ("<|ACTION|>noop<|END|>", "<|ACTION|>do<|END|>")
    assert comp.input_tokens > 0 and comp.output_tokens > 0


@pytest.mark.parametrize("parent_sigterm", ["default", "ignored"])
@pytest.mark.server
def test_a_server_stops_when_the_process_that_started_it_is_killed(tmp_path, parent_sigterm):
    """A rollout or test killed by SIGKILL cannot run its cleanup; the server must still go, also when
    the parent ignores SIGTERM (as under ``nohup ... &`` once Dagster has mapped SIGTERM to SIGINT)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    rules = tmp_path / "rules.json"
    rules.write_text("[]")
    ignore = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if parent_sigterm == "ignored" else ""
    starter = (f"{ignore}from automem_dagster.standins.scripted_server import scripted_server\n"
               f"s = scripted_server({str(rules)!r}, {str(tmp_path / 'server.log')!r}).start()\n"
               "print(s.pid, flush=True)\nimport time; time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            return
        if open(f"/proc/{server_pid}/stat").read().split()[2] == "Z":   # exited, waiting to be reaped by init
            return
        time.sleep(0.2)
    os.killpg(server_pid, signal.SIGKILL)
    pytest.fail(f"server {server_pid} outlived its killed parent by 15 s")


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


def test_an_episode_lane_pins_its_calls_to_one_llama_cpp_slot(scripted):
    """llama.cpp's server takes ``id_slot`` in the request body (tools/server/README.md): lane 3 of a
    2-slot server goes to slot 1; without known slots, or on another server kind, nothing is pinned."""
    import json

    server = scripted([{"match": "", "reply": "ok"}])

    async def go():
        for cfg, slots in ((EndpointConfig(name="g", base_url="x", server="llama.cpp"), 2),
                           (EndpointConfig(name="g", base_url="x", server="llama.cpp"), None),
                           (EndpointConfig(name="g", base_url="x", server="vllm"), 2)):
            client = LLMClient(cfg, server.base_url, slots=slots)
            await client.complete([{"role": "user", "content": "hi"}], lane=3)
            await client.close()

    asyncio.run(go())
    bodies = [json.loads(line)["body"] for line in server.request_log.read_text().splitlines()]
    assert [b.get("id_slot") for b in bodies] == [1, None, None]


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
