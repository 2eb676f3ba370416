"""Endpoint files refuse what a server would accept and ignore: a constrained-decoding mode or an
adapter field the server would not apply, fields Anthropic ignores or caps; the vLLM command and the
docs say what the project relies on."""

from pathlib import Path

import pytest

from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.config import EndpointConfig


@pytest.mark.parametrize(("server", "mode"), [("llama.cpp", "gbnf"), ("vllm", "vllm"), ("openai-compatible", "json_schema")])
def test_the_mode_defaults_to_what_the_server_decodes_under(server, mode):
    cfg = EndpointConfig(name="game", base_url="http://127.0.0.1:9/v1", server=server)
    assert cfg.constrained == mode and cfg.constrained_derived
    assert not EndpointConfig(name="game", base_url="http://127.0.0.1:9/v1", server=server,
                              constrained="none").constrained_derived


@pytest.mark.parametrize(("fields", "says"), [
    ({"server": "vllm", "constrained": "gbnf"}, "constrained: gbnf is read by llama.cpp only"),
    ({"constrained": "gbnf"}, "server is openai-compatible, which would ignore it"),
    ({"server": "openai-compatible", "constrained": "vllm"}, "constrained: vllm is read by vllm only"),
    ({"server": "vllm", "lora_id": 0}, "lora_id selects an adapter of a llama.cpp server"),
])
def test_a_mode_or_adapter_field_the_server_would_ignore_is_refused(fields, says):
    with pytest.raises(ValueError, match=says):
        EndpointConfig(name="game", base_url="http://127.0.0.1:9/v1", **fields)


@pytest.mark.parametrize(("fields", "says"), [
    ({"frequency_penalty": 0.5}, "sets frequency_penalty, which api.anthropic.com accepts and ignores"),
    ({"seed": 7}, "sets seed, which api.anthropic.com"),
    ({"extra_body": {"presence_penalty": 0.2, "logprobs": True}}, "sets logprobs, presence_penalty, which"),
    ({"extra_body": {"reasoning_effort": "low"}}, "sets reasoning_effort"),
    ({"temperature": 1.5}, "caps temperature at 1.0"),
])
def test_a_field_anthropic_ignores_or_caps_is_refused_at_load_naming_it(fields, says):
    """Anthropic's OpenAI SDK compatibility page lists these as ignored, and caps temperature at 1."""
    with pytest.raises(ValueError, match=says):
        EndpointConfig(name="meta", base_url="https://api.anthropic.com/v1/", **fields)
    EndpointConfig(name="meta", base_url="https://api.openai.com/v1/", **fields)  # OpenAI reads them all


def test_the_vllm_server_command_carries_every_flag_the_project_relies_on():
    """Each flag an error message tells a user to add is in docs/vllm.md's server command."""
    from automem_dagster.llm.vllm_lora import RUNTIME_ENV
    from automem_dagster.meta.tool_session import NO_TOOLS_HINT, VLLM_NONE_HINT

    doc = (Path(__file__).parents[3] / "docs" / "vllm.md").read_text()
    command = doc.split("## The server", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    relied_on = [RUNTIME_ENV, "VLLM_BATCH_INVARIANT=1", "--enable-lora", "--max-lora-rank", "--max-model-len",
                 "--enable-prompt-tokens-details", "--enable-auto-tool-choice", "--tool-call-parser",
                 "--exclude-tools-when-tool-choice-none"]
    assert [flag for flag in relied_on if flag not in command] == []
    hinted = [f for f in ("--enable-auto-tool-choice", "--tool-call-parser") if f in NO_TOOLS_HINT]
    hinted += [f for f in ("--exclude-tools-when-tool-choice-none",) if f in VLLM_NONE_HINT]
    assert len(hinted) == 3 and all(flag in command for flag in hinted)


def test_the_docs_state_the_openai_clients_own_retry_after_cap():
    from openai._constants import MAX_RETRY_AFTER_DELAY

    doc = (Path(__file__).parents[3] / "docs" / "endpoints.md").read_text()
    assert f"`Retry-After` (or `retry-after-ms`) of up to {MAX_RETRY_AFTER_DELAY:g} s" in doc
    assert "a longer one means no retry at all" in doc


def test_a_vllm_meta_endpoint_answering_after_tool_choice_none_is_told_the_flag():
    from automem_dagster.meta.tool_session import after_tools_hint

    assert "--exclude-tools-when-tool-choice-none" in after_tools_hint("vllm", True)
    assert after_tools_hint("vllm", False) == "" and after_tools_hint("llama.cpp", True) == ""


def test_the_endpoint_record_says_whether_the_meta_reply_schema_is_enforced_or_described(monkeypatch):
    from automem_dagster.llm.session import Clients

    monkeypatch.setenv("AUTOMEM_TEST_ANTHROPIC_KEY", "sk-test")
    game = LLMClient(EndpointConfig(name="game", base_url="http://127.0.0.1:9/v1"), "http://127.0.0.1:9/v1")
    claude = EndpointConfig(name="meta", base_url="https://api.anthropic.com/v1/", api_key_env="AUTOMEM_TEST_ANTHROPIC_KEY")
    record = Clients(game, None, LLMClient(claude, claude.base_url)).describe()
    assert record["meta"]["reply_schema"] == "described in the prompt and validated (the provider ignores response_format)"
    assert "reply_schema" not in record["game"]
    record = Clients(game, None, game).describe()
    assert record["meta"]["reply_schema"] == "enforced by the server and validated"
