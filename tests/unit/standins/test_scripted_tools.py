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

from tool_calls import LIST, READ, _calls

from automem_dagster.standins.scripted_tools import shape


def test_tool_choice_shapes_what_a_rule_may_answer():
    tools = {"tools": [{"type": "function", "function": {"name": "read_steps"}}]}
    two = _calls(LIST, READ)
    assert shape("openai", {**tools, "tool_choice": "none"}, two) is None
    assert shape("openai", {**tools, "tool_choice": "required"}, "text") is None
    assert shape("openai", {**tools, "tool_choice": {"type": "function", "function": {"name": "read_steps"}}},
                 two)["tool_calls"] == [two["tool_calls"][1]]
    assert len(shape("openai", {**tools, "parallel_tool_calls": False}, two)["tool_calls"]) == 1
    assert len(shape("llama.cpp", {**tools, "parallel_tool_calls": True}, two)["tool_calls"]) == 2
    assert shape("vllm", {}, two) is None and shape("vllm", {}, "text") == "text"
