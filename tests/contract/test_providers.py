"""Endpoints against scripted servers that refuse what real providers refuse.

The scripted server enforces, with each provider's error shape, the rules written down in
``standins/scripted_provider.py`` (OpenAI's parameter rules for reasoning models, Anthropic's
temperature/top_p rule, OpenAI's strict-schema subset, unknown models and keys) and answers a
rate limit with ``Retry-After``. Each test here failed on the request path before this module:
sampling parameters were always sent, ``max_tokens`` could not be renamed, schemas were sent
without ``strict`` (and the revision schema's root was ``anyOf``), and retries ignored
``Retry-After``.
"""

import asyncio
import json

import pytest
from builders import with_routine
from chat_messages import HI

from automem_dagster.llm import EndpointConfig, EndpointError, LLMClient
from automem_dagster.meta.revise import revision_schema
from automem_dagster.scaffold import load_scaffold

REASONING_MODEL = {"models": ["o-reasoner"], "refuse_params": ["temperature", "max_tokens", "top_p"]}
ANTHROPIC = {"models": ["claude-x"], "exclusive_params": [["temperature", "top_p"]], "error_shape": "anthropic"}


def _call(server, schema=None, **cfg):
    async def go():
        client = LLMClient(EndpointConfig(name="meta", **{"constrained": "json_schema", **cfg}), server.base_url)
        try:
            return await client.complete(HI, json_schema=schema, schema_name="probe")
        finally:
            await client.close()

    return asyncio.run(go())


def _requests(server) -> list[dict]:
    return [json.loads(line) for line in server.request_log.read_text().splitlines()]


def test_a_reasoning_model_refuses_temperature_and_max_tokens_with_openais_error(scripted):
    server = scripted([{"match": "hi", "reply": '{"ok": true}'}], REASONING_MODEL)
    with pytest.raises(EndpointError, match=r"HTTP 400.*Unsupported value: 'temperature'"):
        _call(server, model="o-reasoner", temperature=0.7, max_tokens_field="max_completion_tokens")
    with pytest.raises(EndpointError, match=r"HTTP 400.*'max_tokens' is not supported.*max_completion_tokens"):
        _call(server, model="o-reasoner")
    ok = _call(server, model="o-reasoner", max_tokens_field="max_completion_tokens")
    assert ok.text == '{"ok": true}'
    assert "temperature" not in _requests(server)[-1]["body"]


def test_anthropic_refuses_temperature_with_top_p_in_its_own_shape(scripted):
    server = scripted([{"match": "hi", "reply": "fine"}], ANTHROPIC)
    with pytest.raises(EndpointError, match="cannot both be specified"):
        _call(server, model="claude-x", temperature=0.5, top_p=0.9)
    assert _call(server, model="claude-x", temperature=0.5).text == "fine"


def test_unknown_model_and_wrong_key_are_named(scripted, monkeypatch):
    server = scripted([{"match": "", "reply": "x"}], {"models": ["real-model"], "api_key": "sk-right"})
    monkeypatch.setenv("PROVIDER_KEY", "sk-wrong")
    with pytest.raises(EndpointError, match=r"HTTP 401.*api_key_env"):
        _call(server, model="real-model", api_key_env="PROVIDER_KEY")
    monkeypatch.setenv("PROVIDER_KEY", "sk-right")
    with pytest.raises(EndpointError, match=r"HTTP 404.*does not exist.*/v1/models"):
        _call(server, model="typo-model", api_key_env="PROVIDER_KEY")
    assert _call(server, model="real-model", api_key_env="PROVIDER_KEY").text == "x"


def test_strict_provider_takes_the_projects_schemas_and_refuses_the_old_root(scripted):
    server = scripted([{"match": "hi", "reply": "{}"}], {"strict_schemas": True})
    parent = load_scaffold("crafter", 0)
    assert _call(server, schema=revision_schema(parent)).text == "{}"
    old_root = {"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]}
    with pytest.raises(EndpointError, match=r"Invalid schema for response_format 'probe'.*root must be an object"):
        _call(server, schema=old_root)
    sent = _requests(server)[0]["body"]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["strict"] is True


def test_rate_limit_retry_after_is_honoured_and_attempts_counted(scripted):
    """OpenAI's client waits what ``Retry-After`` says (up to 60 s): the second attempt comes no
    sooner. The hand-written retry it replaced slept 0.5 s whatever the server said."""
    server = scripted([{"match": "hi", "status": 429, "error": "Rate limit reached", "times": 1,
                        "headers": {"Retry-After": "2"}},
                       {"match": "hi", "reply": "after the wait"}])
    comp = _call(server, max_retries=2)
    assert comp.text == "after the wait" and comp.attempts == 2
    first, second = _requests(server)
    assert second["t"] - first["t"] >= 1.9 and second["headers"].get("x-stainless-retry-count") == "1"


def test_openai_environment_variables_fill_what_a_file_leaves_out(monkeypatch, scripted):
    server = scripted([{"match": "hi", "reply": "from env"}], {"api_key": "sk-env"})
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    cfg = EndpointConfig(name="meta", model="m", constrained="none")
    assert cfg.base_url == server.base_url and cfg.key_source() == "OPENAI_API_KEY"
    assert _call(server, model="m", base_url=None).text == "from env"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert EndpointConfig(name="game").embedded and EndpointConfig(name="game").api_key() == "not-needed"


def test_a_hosted_game_model_plays_through_json_turns(tmp_path, scripted):
    """With ``constrained: json_schema`` every LOG and PLAN turn goes out as a strict schema (a provider
    that enforces the subset takes them) and the JSON replies become memory operations and actions."""
    from automem_dagster.agent import MemoryAgent
    from automem_dagster.games import make_game
    from automem_dagster.memory import Journal, MemoryStore

    server = scripted([
        {"match": "Phase: LOG", "reply": json.dumps({"writes": [{"op": "APPEND", "file": "actions_log.txt",
                                                                  "text": "went west"}], "read": None})},
        {"match": "Phase: PLAN", "replies": [json.dumps({"next": {"op": "READ", "file": "actions_log.txt"}}),
                                             json.dumps({"next": {"action": "move_west"}})]},
    ], {"models": ["hosted"], "strict_schemas": True, "refuse_params": ["top_p"]})

    async def go():
        game = make_game("crafter", max_steps=10)
        store = MemoryStore(tmp_path / "files", journal=Journal(tmp_path / "journal.jsonl"))
        client = LLMClient(EndpointConfig(name="game", model="hosted", constrained="json_schema"), server.base_url)
        scaffold = with_routine("crafter", log_every=1)   # a LOG after every action, as below
        agent = MemoryAgent(scaffold, store, game.actions(), game.parse_action, client)
        result, outcomes = game.reset(7), []
        for t in range(3):
            agent.observe_state(result.state)
            outcome = await agent.step(t, result.observation)
            result = game.step(outcome.action)
            agent.record_outcome(outcome.action, result.reward)
            outcomes.append(outcome)
        await client.close()
        game.close()
        return store, outcomes

    store, outcomes = asyncio.run(go())
    assert [d.action for d in outcomes] == ["move_west"] * 3 and all(d.valid for d in outcomes)
    turns = [t for d in outcomes for t in d.turns]
    assert not any(t.errors for t in turns)
    assert outcomes[1].turns[0].text == "<|APPEND|>actions_log.txt|went west\n<|DONE|>"
    assert outcomes[0].turns[0].text == "<|READ|>actions_log.txt" and outcomes[0].turns[0].ops[0].ok
    assert store.read_text("actions_log.txt").splitlines() == ["went west", "went west"]
    names = {r["body"]["response_format"]["json_schema"]["name"] for r in _requests(server)}
    assert names == {"log_turn", "plan_turn"}
