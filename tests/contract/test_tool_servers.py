"""The tool-using meta-LLM against scripted servers that treat tool calls as the real ones do.

None of the servers users have for tool calling runs here, so the scripted server plays each
(``provider={"tool_calling": ...}``, ``standins/scripted_tools.py``), with the behaviour their docs and
sources give: ``tool_choice`` honoured (OpenAI's chat-completions reference; vLLM's tool-calling
docs, vllm>=0.8.3; llama.cpp's ``common_chat_tool_choice_parse_oaicompat``; assumed for Anthropic's layer, whose
docs.anthropic.com/en/api/openai-sdk lists ``parallel_tool_calls`` but not it), llama.cpp's ``parallel_tool_calls``
defaulting to false (tools/server/server-common.cpp ``oaicompat_chat_params_parse``), OpenAI's and
Anthropic's refusal of tool messages that do not answer the calls' ids (their error wording as
reported in smarter-sh/smarter#264, dapr/dapr-agents#145, router-for-me/CLIProxyAPI#2798,
anthropics/claude-code#5060 and #13460), each server's id format, and llama.cpp's HTTP 500
"tools param requires --jinja flag" without ``--jinja`` (same llama.cpp function; a
``std::runtime_error``, which its HTTP layer answers as ``server_error``). The batch is a 40-step
MiniHack episode played by the memory agent on the scripted server (``benchmarks.meta_modes.play``).
"""

import asyncio
import json

import pytest
from tool_calls import LIST, READ, _calls, tools_client

from automem_dagster.llm.client import EndpointError
from automem_dagster.meta.batch_tools import BatchTools
from automem_dagster.meta.diagnose import DiagnosisError, diagnose
from automem_dagster.meta.revise import propose_revision
from automem_dagster.meta.tool_session import refuses_tools
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.scaffold import load_scaffold
from benchmarks.meta_modes import EPISODE, play

ID_PREFIX = {"openai": "call_", "anthropic": "toolu_01", "vllm": "chatcmpl-tool-", "llama.cpp": ""}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return play(tmp_path_factory.mktemp("batch40"), 40)


def _finding(step):
    return json.dumps({"summary": "The agent walks back and forth in the corridor.", "findings": [
        {"episode": EPISODE, "step": step, "kind": "oscillation", "what_happened": "west then east",
         "scaffold_cause": "no oscillation signal", "proposed_change": "enable the oscillation signal"}]})


# Read steps 10-20 (after listing the episodes, in one reply or, one call per reply, in two), then diagnose.
READING = [{"match": "--- step 20\n", "reply": _finding(15)},
           {"match": f"{EPISODE}: seed 7, 40 steps", "reply": _calls(READ)},
           {"match": "Diagnose this batch", "reply": _calls(LIST, READ)}]


def _requests(server) -> list[dict]:
    return [json.loads(line)["body"] for line in server.request_log.read_text().splitlines()]


@pytest.mark.parametrize("kind", ["openai", "anthropic", "vllm", "llama.cpp"])
def test_the_diagnosis_passes_on_each_servers_tool_calling(batch, scripted, tmp_path, kind):
    """Each server's ids are echoed in the tool messages (OpenAI and Anthropic refuse the request
    otherwise); llama.cpp, without ``parallel_tool_calls``, gives one call per reply and the
    conversation reads on."""
    server = scripted(READING, provider={"tool_calling": kind})
    result = asyncio.run(diagnose(batch, load_scaffold("minihack", 0), tools_client(server), tmp_path / "out"))
    assert [f["step"] for f in result.findings] == [15] and result.cost["steps_read"] == {EPISODE: "10-20"}
    second = _requests(server)[1]["messages"]
    calls = second[2]["tool_calls"]
    answers = [m["tool_call_id"] for m in second[3:] if m["role"] == "tool"]
    assert answers == [c["id"] for c in calls] and all(c["id"].startswith(ID_PREFIX[kind]) for c in calls)
    assert len(calls) == (1 if kind == "llama.cpp" else 2) and result.cost["requests"] == (3 if kind == "llama.cpp" else 2)


def test_the_revision_through_tools_keeps_the_pairing_openai_checks(batch, scripted, tmp_path):
    patch = json.dumps({"patch": {"signals": {"oscillation": {"enabled": True, "window": 6}},
                                  "rationale": "Finding 1: west then east at step 15."}})
    server = scripted([{"match": "--- step 20\n", "reply": patch}, {"match": "Propose one patch", "reply": _calls(LIST, READ)}],
                      provider={"tool_calling": "openai"})
    scaffold = load_scaffold("minihack", 0)
    tools = BatchTools.of_episodes(finished_episodes(batch), scaffold)
    revision = asyncio.run(propose_revision(scaffold, "## Findings", tmp_path, tools_client(server), 1, tools=tools))
    assert revision.accepted and revision.cost["tool_calls"] == 2 and len(_requests(server)) == 2


def test_a_server_that_honours_tool_choice_none_gets_the_diagnosis_after_the_budget(batch, scripted, tmp_path):
    """Once the tool calls are spent the session asks with ``tool_choice: "none"``: a real server's model then
    writes text, so the rule that would call a tool again is passed over (the bare scripted server, which
    ignores it, is stopped instead: test_meta_tools)."""
    server = scripted([{"match": "Diagnose this batch", "reply": _calls(READ)},
                       {"match": "Tool use is over", "reply": _finding(15)}], provider={"tool_calling": "openai"})
    result = asyncio.run(diagnose(batch, load_scaffold("minihack", 0), tools_client(server, meta_tool_calls=1),
                                  tmp_path / "out"))
    assert result.cost["stops"] == ["calls"] and [c["ran"] for c in result.tool_calls] == [True]
    assert [r["tool_choice"] for r in _requests(server)] == ["auto", "none"]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_tool_messages_that_do_not_answer_the_calls_are_refused_in_the_servers_words(scripted, kind):
    server = scripted([{"match": "", "reply": "ok"}], provider={"tool_calling": kind})
    client = tools_client(server)
    tools = [{"type": "function", "function": {"name": "list_episodes", "parameters": {"type": "object"}}}]
    ask = {"role": "user", "content": "list them"}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "list_episodes", "arguments": "{}"}} for i in ("a1", "b2")]}
    cases = {
        "orphan": [ask, {"role": "tool", "tool_call_id": "a1", "content": "x"}],
        "unknown": [ask, call, {"role": "tool", "tool_call_id": "zz", "content": "x"}],
        "unanswered": [ask, call, {"role": "tool", "tool_call_id": "a1", "content": "x"}, ask],
    }
    words = {"openai": {"orphan": "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
                        "unknown": "'tool_call_id' of 'zz' not found in 'tool_calls' of previous message",
                        "unanswered": "The following tool_call_ids did not have response messages: b2"},
             "anthropic": {"orphan": "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks: a1",
                           "unknown": "unexpected `tool_use_id` found in `tool_result` blocks: zz",
                           "unanswered": "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
                                         "after: b2"}}[kind]
    for case, messages in cases.items():
        with pytest.raises(EndpointError) as err:
            asyncio.run(client.complete(messages, tools=tools))
        assert err.value.status == 400 and words[case] in str(err.value) and refuses_tools(err.value) is None, case
    assert asyncio.run(client.complete([ask, call, *[{"role": "tool", "tool_call_id": i, "content": "x"}
                                                     for i in ("a1", "b2")]], tools=tools)).text == "ok"


def test_a_llama_cpp_without_jinja_gets_pointed_to_the_one_call_mode(batch, scripted, tmp_path):
    server = scripted(READING, provider={"tool_calling": "llama.cpp", "jinja": False})
    with pytest.raises(DiagnosisError, match="cannot call tools") as err:
        asyncio.run(diagnose(batch, load_scaffold("minihack", 0), tools_client(server, max_retries=0), tmp_path / "out"))
    assert "cannot call tools: it answered HTTP 500 'tools param requires --jinja flag'; serve the model" in str(err.value)
    assert "llama.cpp: --jinja" in str(err.value) and "meta_mode: one_call" in str(err.value)
