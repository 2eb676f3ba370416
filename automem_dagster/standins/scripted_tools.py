"""What real servers do with tool calls, for the scripted server (``Provider.tool_calling``).

The tool-using meta-LLM (``meta/tool_session.py``) talks to OpenAI, Anthropic's OpenAI-compatible
layer, vLLM and llama.cpp; none of them runs here, so the scripted server can be told to behave
as one of them does with ``tools``. Each rule below is what that server's documentation or
source says, with the wording of its errors as users have reported them:

* Every server honours ``tool_choice`` (OpenAI's chat-completions reference: ``none`` means the
  model will not call a tool, ``required`` that it must call one or more, a named function that
  it must call that one; vLLM's tool-calling docs support all four as of vllm>=0.8.3; llama.cpp
  parses ``none``/``auto``/``required`` in ``common_chat_tool_choice_parse_oaicompat``; for
  Anthropic's layer this is an assumption: the part of its compatibility page read here lists
  ``parallel_tool_calls`` as fully supported but not ``tool_choice``). A rule whose reply the model
  could not give under the request's ``tool_choice`` is passed over, as if the model had
  answered otherwise.
* ``parallel_tool_calls: false`` leaves at most one call per reply. llama.cpp's default is false
  (tools/server/server-common.cpp ``oaicompat_chat_params_parse``: ``json_value(body,
  "parallel_tool_calls", false)``); OpenAI's and Anthropic's is true.
* OpenAI checks the conversation: a ``tool`` message must follow an assistant message with
  ``tool_calls`` (HTTP 400 "Invalid parameter: messages with role 'tool' must be a response to a
  preceeding message with 'tool_calls'.", param ``messages.[i].role``), must name one of its ids
  ("Invalid parameter: 'tool_call_id' of '<id>' not found in 'tool_calls' of previous message."),
  and every id must be answered before the next message ("An assistant message with 'tool_calls'
  must be followed by tool messages responding to each 'tool_call_id'. The following
  tool_call_ids did not have response messages: <ids>", param ``messages.[i].role``; ``i`` here
  is the assistant message, an assumption: the reports do not show which message it counts), each
  ``invalid_request_error`` with code null (reported verbatim in smarter-sh/smarter#264,
  dapr/dapr-agents#145 and router-for-me/CLIProxyAPI#2798).
* Anthropic's layer turns the conversation into its Messages API, which checks the same pairing
  in its own words and shape ("messages.<i>: `tool_use` ids were found without `tool_result`
  blocks immediately after: <ids>. ..." and "messages.<i>.content.0: unexpected `tool_use_id`
  found in `tool_result` blocks: <id>. ...", anthropics/claude-code#5060 and #13460; ``<i>``
  counts the messages left once system messages are hoisted out); it ignores ``strict`` in a
  function definition and ``response_format`` (docs.anthropic.com/en/api/openai-sdk).
* vLLM keeps the tools in the prompt under ``tool_choice: "none"`` and runs no tool parser on the
  reply unless started with ``--exclude-tools-when-tool-choice-none`` (vllm/entrypoints/openai/
  cli_args.py, default false; serving_chat.py drops the tools only with it), so a model that calls
  a tool anyway answers with the call's markup as text (Hermes' ``<tool_call>`` form here); with
  the flag the model never saw the tools and such a rule is passed over.
* vLLM renders the conversation through the chat template and checks no ids; without
  ``--enable-auto-tool-choice --tool-call-parser`` it refuses ``tool_choice: "auto"``
  (``Provider.refuse_auto_tools``).
* llama.cpp without ``--jinja`` throws "tools param requires --jinja flag" for a request with
  tools and "tool_choice param requires --jinja flag" for a ``tool_choice`` other than ``auto``;
  they are ``std::runtime_error``, which its HTTP layer answers as HTTP 500 ``server_error``
  (``{"error": {"code": 500, "message", "type": "server_error"}}``). With ``--jinja``, a request
  with tools (``tool_choice`` not ``none``) and a custom ``grammar`` is HTTP 400 "Cannot use custom
  grammar constraints with tools." (``std::invalid_argument``).

Tool-call ids look like each server's: ``call_`` + 24 characters (OpenAI), ``toolu_01`` + 22
(Anthropic), ``chatcmpl-tool-`` + 32 hex digits (vLLM), 32 characters (llama.cpp's
``gen_tool_call_id``).
"""

from __future__ import annotations

import hashlib
import json

SERVERS = ("openai", "anthropic", "vllm", "llama.cpp")


def refusal(server: str, body: dict, jinja: bool = True) -> tuple[int, dict] | None:
    """``(status, error payload)`` when ``server`` refuses ``body`` over its tools or tool conversation."""
    if server == "llama.cpp":
        return _llama_cpp(body, jinja)
    if server == "openai":
        return _openai_pairing(body.get("messages", []))
    if server == "anthropic":
        return _anthropic_pairing(body.get("messages", []))
    return None


def shape(server: str, body: dict, reply: str | dict, exclude_tools_when_none: bool = False) -> str | dict | None:
    """``reply`` as the model could give it under the request's ``tool_choice`` and
    ``parallel_tool_calls``: tool calls cut to one where parallel calls are off, or None where it
    could not be given at all (text when a call is required, a call when tools are off); on vLLM
    under ``tool_choice: "none"`` without ``exclude_tools_when_none``, a call as markup text."""
    tools = body.get("tools") or []
    choice = body.get("tool_choice", "auto" if tools else "none")
    calls = reply.get("tool_calls") if isinstance(reply, dict) else None
    if calls is None:
        return None if tools and (choice == "required" or isinstance(choice, dict)) else reply
    if tools and choice == "none" and server == "vllm" and not exclude_tools_when_none:
        return "\n".join(f'<tool_call>\n{json.dumps({"name": c["name"], "arguments": c["arguments"]})}\n</tool_call>'
                         for c in calls)
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        calls = [c for c in calls if c["name"] == choice.get("function", {}).get("name")][:1]
    if not body.get("parallel_tool_calls", server != "llama.cpp"):
        calls = calls[:1]
    return {"tool_calls": calls} if calls else None


def call_id(server: str | None, request: int, index: int) -> str:
    """The id of call ``index`` of the reply to request ``request``, in the server's format."""
    if server is None:
        return f"call_{request}_{index}"
    digest = hashlib.sha256(f"{server}/{request}/{index}".encode()).hexdigest()
    return {"openai": f"call_{digest[:24]}", "anthropic": f"toolu_01{digest[:22]}",
            "vllm": f"chatcmpl-tool-{digest[:32]}"}.get(server, digest[:32])


def _llama_cpp(body: dict, jinja: bool) -> tuple[int, dict] | None:
    tools, choice = body.get("tools") or [], body.get("tool_choice", "auto")
    if not jinja and (tools or choice != "auto"):
        what = "tools" if tools else "tool_choice"
        return 500, {"error": {"code": 500, "message": f"{what} param requires --jinja flag", "type": "server_error"}}
    if tools and choice != "none" and "grammar" in body:
        return 400, {"error": {"code": 400, "message": "Cannot use custom grammar constraints with tools.",
                               "type": "invalid_request_error"}}
    return None


def _pairing(messages: list[dict]) -> tuple[str, int, list[str] | str] | None:
    """The first break in the pairing of tool calls and tool messages: ``("orphan", i, id)`` for a
    tool message with no call before it, ``("unknown", i, id)`` for one naming an id the calls lack,
    ``("unanswered", i, ids)`` for calls of assistant message ``i`` left unanswered; None when it holds."""
    expected: list[str] | None = None
    answered: set[str] = set()
    owner = 0
    for i, message in enumerate([*messages, {"role": "end"}]):
        if message.get("role") == "tool":
            if expected is None:
                return "orphan", i, message.get("tool_call_id", "")
            if message.get("tool_call_id") not in expected:
                return "unknown", i, message.get("tool_call_id", "")
            answered.add(message["tool_call_id"])
            continue
        missing = [c for c in expected or [] if c not in answered]
        if missing:
            return "unanswered", owner, missing
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        expected, answered, owner = ([c["id"] for c in calls] if calls else None), set(), i
    return None


def _openai_pairing(messages: list[dict]) -> tuple[int, dict] | None:
    broken = _pairing(messages)
    if broken is None:
        return None
    kind, i, ids = broken
    message, param = {
        "orphan": ("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                   "'tool_calls'.", f"messages.[{i}].role"),
        "unknown": (f"Invalid parameter: 'tool_call_id' of '{ids}' not found in 'tool_calls' of previous message.", None),
        "unanswered": ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                       f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(ids)}",
                       f"messages.[{i}].role"),
    }[kind]
    return 400, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}


def _anthropic_pairing(messages: list[dict]) -> tuple[int, dict] | None:
    broken = _pairing([m for m in messages if m.get("role") != "system"])
    if broken is None:
        return None
    kind, i, ids = broken
    if kind == "unanswered":
        message = (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                   f"{', '.join(ids)}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.")
    else:
        message = (f"messages.{i}.content.0: unexpected `tool_use_id` found in `tool_result` blocks: {ids}. Each "
                   "`tool_result` block must have a corresponding `tool_use` block in the previous message.")
    return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
