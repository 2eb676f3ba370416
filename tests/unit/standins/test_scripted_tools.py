"""``tool_choice`` shapes what a scripted tool-calling rule may answer (``standins/scripted_tools.py``)."""

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
