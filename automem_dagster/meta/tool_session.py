"""The meta-LLM's conversation in the tool-using mode: tool calls answered until it replies.

The meta-LLM gets OpenAI ``tools`` (``batch_tools.BatchTools``) and answers either with
``tool_calls`` (each is run, its result sent back as a ``tool`` message) or with text: its
diagnosis, or its patch (the session's ``task``; the diagnosis and the revision each have a
session of their own). Two bounds keep each affordable, both on the meta endpoint:
``meta_tool_calls`` (tool calls run; calls beyond it are answered "not run" and the next
request sets ``tool_choice: none``, so the model must write its diagnosis from what it has
read) and ``meta_token_budget`` (prompt and reply tokens of every request together, as the
server reports them; once spent, one last request without tool use is allowed, and a session
that still has no reply stops with ``BudgetSpent``). Every call is recorded with the size of
its result and the steps it put in front of the model, for ``diagnosis.json``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from automem_dagster.llm.client import Completion, EndpointError, LLMClient
from automem_dagster.meta.batch_tools import BatchTools
from automem_dagster.meta.compress import ranges

NO_TOOLS_HINT = ("serve the model with tool calling (vLLM: --enable-auto-tool-choice --tool-call-parser <parser>; "
                 "llama.cpp: --jinja) or set meta_mode: one_call on the meta endpoint, which needs no tool calling")

VLLM_NONE_HINT = ("vLLM keeps the tools in the prompt under tool_choice 'none' unless started with "
                  "--exclude-tools-when-tool-choice-none (vllm/entrypoints/openai/cli_args.py), so the model may write "
                  "tool-call markup as text: restart vLLM with that flag")
"""What to do when a vLLM meta endpoint's answers after tool use is over are not the reply asked for."""


def after_tools_hint(server: str | None, tools_stopped: bool) -> str:
    """``VLLM_NONE_HINT`` (with its separator) when a vLLM server was sent ``tool_choice: none``, else ''."""
    return f"; {VLLM_NONE_HINT}" if tools_stopped and server == "vllm" else ""


IGNORED_CALLS = 8
"""Tool calls answered "not run" after which a model that goes on calling tools is stopped (a server
that ignores ``tool_choice: none`` and reports no usage would otherwise never spend the token budget)."""


class BudgetSpent(RuntimeError):
    """The token budget ran out before the meta-LLM replied; the message says how far it got."""


class ToolsUnsupported(EndpointError):
    """The meta endpoint refused a request because of its ``tools`` (a vLLM without a tool-call parser,
    a llama.cpp without ``--jinja``); the message points to the fix and to the one-call mode."""


_NO_TOOLS = re.compile(r'"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
                       r"|tool(?:s|_choice) param requires --jinja flag|\S+ does not support tools")
"""How servers say they cannot take ``tools``: vLLM without a parser (HTTP 400 '"auto" tool choice requires
--enable-auto-tool-choice and --tool-call-parser to be set'), llama.cpp without ``--jinja`` (HTTP 500 'tools
param requires --jinja flag', retried by the client as any 500 before it gives up), a model without tool
support ('does not support tools'). A refusal of a badly paired tool conversation is not one of them."""


def refuses_tools(exc: EndpointError) -> str | None:
    """The server's words when a refusal says it or its model cannot call tools at all (``_NO_TOOLS``)."""
    found = _NO_TOOLS.search(str(exc)) if exc.status is not None else None
    return found.group(0) if found else None


@dataclass
class ToolCallRecord:
    """One tool call as ``diagnosis.json`` keeps it."""

    name: str
    arguments: str
    result_chars: int
    cut: bool
    error: bool
    ran: bool
    steps_read: dict[str, str]
    steps_shown: dict[str, str]


@dataclass
class ToolSession:
    """A conversation with the meta endpoint over ``tools``; ``ask`` runs it until a text reply."""

    client: LLMClient
    tools: BatchTools
    messages: list[dict]
    calls: list[ToolCallRecord] = field(default_factory=list)
    read: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    shown: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    stops: list[str] = field(default_factory=list)
    """Why tool use was switched off, in order (calls spent, tokens spent)."""
    task: str = "diagnosis"
    """What the text reply holds (``diagnosis`` or ``patch``), for what the model and the errors are told."""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def calls_run(self) -> int:
        return sum(c.ran for c in self.calls)

    def seen(self, episode: str, step: int) -> bool:
        """Whether the model read ``step`` verbatim or was shown it by a tool."""
        return step in self.read.get(episode, ()) or step in self.shown.get(episode, ())

    async def ask(self) -> Completion:
        """Requests until the model answers with text (its diagnosis), running its tool calls."""
        cfg = self.client.config
        while True:
            over = self.tokens >= cfg.meta_token_budget
            if over and "tokens" in self.stops:
                raise BudgetSpent(f"the {self.task} spent {self.tokens} tokens of its meta_token_budget "
                                  f"{cfg.meta_token_budget} in {self.requests} request(s) and {self.calls_run} tool call(s) "
                                  "without a usable reply; raise meta_token_budget on the meta endpoint")
            if over:
                self._stop("tokens", f"the token budget of {cfg.meta_token_budget} is spent")
            if self.calls_run >= cfg.meta_tool_calls:
                self._stop("calls", f"the budget of {cfg.meta_tool_calls} tool calls is spent")
            completion = await self._request()
            self.requests += 1
            self.input_tokens += completion.input_tokens
            self.output_tokens += completion.output_tokens
            if not completion.tool_calls:
                return completion
            if self.stops and sum(not c.ran for c in self.calls) >= IGNORED_CALLS:
                raise BudgetSpent(f"the model kept calling tools after tool use was over ({', '.join(self.stops)} spent) "
                                  f"in {self.requests} request(s); the server may not honour tool_choice 'none'"
                                  + after_tools_hint(self.client.config.server, True))
            self.messages.append({"role": "assistant", "content": completion.text or None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in completion.tool_calls]})
            for call in completion.tool_calls:
                self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": self._run(call)})

    async def _request(self) -> Completion:
        """One request with the tools (``tool_choice: none`` once tool use is over); a server that refuses
        tools raises ``ToolsUnsupported`` with the fix."""
        try:
            return await self.client.complete(self.messages, tools=self.tools.schemas(),
                                              tool_choice="none" if self.stops else "auto")
        except EndpointError as exc:
            words = refuses_tools(exc)
            if words is None:
                raise
            raise ToolsUnsupported(f"the meta endpoint {exc.endpoint!r} ({exc.base_url}) cannot call tools: it answered "
                                   f"HTTP {exc.status} '{words}'; {NO_TOOLS_HINT}", exc.status, exc.endpoint,
                                   exc.base_url, exc.failures) from exc

    def _run(self, call: dict) -> str:
        """The tool message for one call: its result, or why it was not run."""
        limit = self.client.config.meta_tool_calls
        if self.stops or self.calls_run >= limit:
            why = "tool use is over" if self.stops else f"the budget of {limit} tool calls is spent"
            text = f"not run: {why}; reply now with your {self.task} as JSON{self._citing}"
            self.calls.append(ToolCallRecord(call["name"], call["arguments"], len(text), False, True, False, {}, {}))
            return text
        result = self.tools.call(call["name"], call["arguments"])
        for episode, steps in result.read.items():
            self.read[episode] |= steps
        for episode, steps in result.shown.items():
            self.shown[episode] |= steps
        self.calls.append(ToolCallRecord(call["name"], call["arguments"], len(result.text), result.cut, result.error,
                                         True, _ranges_by_episode(result.read), _ranges_by_episode(result.shown)))
        return result.text

    def _stop(self, kind: str, why: str) -> None:
        """Switch tool use off for good (the next requests say ``tool_choice: none``) and tell the model why."""
        if kind not in self.stops:
            self.stops.append(kind)
            self.messages.append({"role": "user", "content": f"Tool use is over: {why}. Reply with your {self.task} "
                                  f"as JSON now{self._citing}."})

    @property
    def _citing(self) -> str:
        return ", citing only steps you have read or were shown" if self.task == "diagnosis" else ""

    def summary(self) -> dict:
        """The session's cost and reach, for ``diagnosis.json`` and MLflow."""
        return {"requests": self.requests, "tool_calls": self.calls_run, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "stops": list(self.stops),
                "steps_read": _ranges_by_episode(self.read), "steps_shown": _ranges_by_episode(self.shown),
                "steps_read_count": sum(len(s) for s in self.read.values())}


def _ranges_by_episode(steps: dict[str, set[int]]) -> dict[str, str]:
    return {episode: ranges(s) for episode, s in sorted(steps.items()) if s}
