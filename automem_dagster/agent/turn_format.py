"""What a LOG, PLAN or action turn may say, as a GBNF grammar or as a strict JSON schema.

A server with grammars (llama.cpp, vLLM) gets the grammar of ``grammar.py`` and answers in
the memory-token syntax. A hosted API has no grammars but has Structured Outputs, so with
``constrained: json_schema`` the same turn is asked for as one JSON object whose operation
names, file names and actions are enums of what the scaffold enables, the store holds and the
game accepts, and whose free text is bounded. The JSON reply is turned back into the token
syntax at once (``json_turn_text``), so trajectories, parsing, metrics and curation see one
format whatever the backend.

JSON forms (every object strict: all keys present, ``null`` for "none"):

* LOG: ``{"writes": [op, ...]}``: the writes within the operation budget, then ``<|DONE|>``;
* PLAN: ``{"next": {"reads": [op, ...]} | {"action": a} | {"done": true}}``: read-only
  consultations within the budget, or the end of the phase (the action in one-model mode,
  ``done`` for the two-model memory model);
* action: ``{"action": a}``; chain of thought: ``{"thought": "...", "action": a}``;
* the summary baseline's rewrite: ``{"summary": "..."}``.

An operation is ``{"op": "APPEND", "file": "notes.txt", "text": "..."}`` with the arguments
its token takes (``count`` for TAIL, ``keyword`` for SEARCH and COUNT, ``key`` and ``text``
for UPSERT).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from automem_dagster.agent.grammar import (
    READ_OPS,
    WRITE_OPS,
    TurnGrammar,
    action_grammar,
    reasoning_grammar,
    summary_grammar,
)
from automem_dagster.cpu_ledger import LEDGER
from automem_dagster.llm.client import Completion, LLMClient
from automem_dagster.llm.strict_schema import bounded_text
from automem_dagster.memory.ops import OpName

# Printable ASCII without the characters the token syntax or a JSON string would need escaped
# for: `"` and `\` (JSON), `<` (starts a token), `|` (separates arguments); a key also not `:`.
_TEXT = r"[ -!#-;=-\[\]-{}-~]"
_KEY = r"[ -!#-9;=-\[\]-{}-~]"
_THOUGHT = r"[ -!#-;=-\[\]-~]"
_NEW_FILE = r"^[a-z0-9_][a-z0-9_-]{0,30}\.txt$"

_ARGS = {
    OpName.READ: (), OpName.SUMMARIZE: (), OpName.DELETE: (), OpName.CREATE: (),
    OpName.TAIL: ("count",), OpName.SEARCH: ("keyword",), OpName.COUNT: ("keyword",),
    OpName.APPEND: ("text",), OpName.WRITE: ("text",), OpName.UPSERT: ("key", "text"),
}


@dataclass(frozen=True)
class TurnConstraint:
    """One turn's constraint in both forms; the client's ``constrained`` mode picks one."""

    name: str
    grammar: str
    schema: dict


def _obj(props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _enum(values: list[str]) -> dict:
    return {"type": "string", "enum": list(values)}


class TurnFormats:
    """Both forms of every memory-agent turn for one scaffold (limits on text, key, keyword)."""

    def __init__(self, operations, text_max: int, key_max: int, keyword_max: int):
        self.operations = list(operations)
        self.grammar = TurnGrammar(self.operations, text_max, key_max, keyword_max)
        self._arg_schemas = {
            "count": {"type": "integer", "minimum": 1, "maximum": 99},
            "keyword": bounded_text(keyword_max, 1, _TEXT),
            "key": bounded_text(key_max, 1, _KEY),
            "text": bounded_text(text_max, 1, _TEXT),
        }

    def _op_schemas(self, kinds: tuple[OpName, ...], files: list[str], writable: list[str]) -> list[dict]:
        """One object schema per enabled operation of ``kinds`` that has a file to act on."""
        out = []
        for op in self.operations:
            if op not in kinds:
                continue
            if op is OpName.CREATE:
                file = {"type": "string", "pattern": _NEW_FILE}
            else:
                names = writable if op in WRITE_OPS else files
                if not names:  # a model may have deleted every file; an empty enum is not a schema
                    continue
                file = _enum(names)
            out.append(_obj({"op": _enum([op.value]), "file": file,
                             **{arg: self._arg_schemas[arg] for arg in _ARGS[op]}}))
        return out

    @LEDGER.charged("request")
    def log_turn(self, files: list[str], writable: list[str], remaining: int, least: int = 0) -> TurnConstraint:
        """At least ``least`` and up to ``remaining`` writes, then DONE (an empty list is DONE alone)."""
        writes = self._op_schemas(WRITE_OPS, files, writable)
        items = {"anyOf": writes} if writes else {"type": "null"}
        least = min(least, remaining) if writes else 0
        props = {"writes": {"type": "array", "items": items, "maxItems": remaining if writes else 0,
                            **({"minItems": least} if least else {})}}
        return TurnConstraint("log_turn", self.grammar.log_turn(files, writable, remaining, least), _obj(props))

    @LEDGER.charged("request")
    def plan_turn(self, files: list[str], actions: list[str], consult: bool, end_with_done: bool = False,
                  reads: int = 1, least: int = 0) -> TurnConstraint:
        """A consultation of up to ``reads`` reads on ``files``, or the end of the phase (the action,
        or ``done`` in two-model mode); with ``least`` and something to read, at least that many
        reads and no end."""
        ending = _obj({"done": {"type": "boolean", "enum": [True]}}) if end_with_done else _obj({"action": _enum(actions)})
        ops = self._op_schemas(READ_OPS, files, []) if consult and files and reads > 0 else []
        least = min(least, reads) if ops else 0
        options = [_obj({"reads": {"type": "array", "items": {"anyOf": ops}, "maxItems": reads,
                                   **({"minItems": least} if least else {})}})] if ops else []
        schema = _obj({"next": {"anyOf": options if least else [*options, ending]}})
        grammar = self.grammar.plan_turn(files, actions, consult, end_with_done, reads, least)
        return TurnConstraint("plan_turn", grammar, schema)


def action_turn(actions: list[str]) -> TurnConstraint:
    """The game model's turn in two-model mode, and the window baseline's: exactly one action."""
    return TurnConstraint("action_turn", action_grammar(actions), _obj({"action": _enum(actions)}))


def reasoning_turn(actions: list[str], max_chars: int) -> TurnConstraint:
    """One bounded line of reasoning, then the action (the chain-of-thought baseline)."""
    schema = _obj({"thought": bounded_text(max_chars, 1, _THOUGHT), "action": _enum(actions)})
    return TurnConstraint("reasoning_turn", reasoning_grammar(actions, max_chars), schema)


def summary_turn(max_chars: int) -> TurnConstraint:
    """The summary baseline's rewrite of its running summary: bounded free text, no action."""
    return TurnConstraint("summary_turn", summary_grammar(max_chars), _obj({"summary": bounded_text(max_chars, 1, _THOUGHT)}))


def op_text(op: dict) -> str:
    """``{"op": "UPSERT", "file": f, "key": k, "text": t}`` as ``<|UPSERT|>f|k|t``."""
    name = OpName(op["op"])
    args = [str(op["file"]), *(str(op[a]) for a in _ARGS[name])]
    return f"<|{name.value}|>" + "|".join(args)


def json_turn_text(reply: str) -> str:
    """A JSON turn in the memory-token syntax; a reply that is not one of the JSON forms is
    returned as it is, so the token parser reports it as a malformed turn."""
    try:
        data = json.loads(reply)
        if not isinstance(data, dict):
            return reply
        if set(data) == {"summary"}:
            return str(data["summary"])
        if "next" in data:
            data = data["next"]
        if "done" in data:
            return "<|DONE|>"
        if "action" in data and "op" not in data:
            action = f"<|ACTION|>{data['action']}<|END|>"
            return f"{data['thought']}\n{action}" if data.get("thought") else action
        if "op" in data:
            return op_text(data)
        if "reads" in data:
            return "\n".join(op_text(op) for op in data["reads"] or [])
        if "writes" in data:
            return "\n".join([*(op_text(op) for op in data["writes"] or []), "<|DONE|>"])
    except (ValueError, KeyError, TypeError):
        return reply
    return reply


JSON_REPLY_NOTE = "Reply with one JSON object in the required response format, compact on one line."
"""Added to the system message of a JSON turn: the prompts describe the token syntax, and a JSON
grammar lets a model pad its reply with whitespace (llama.cpp allows a line break and up to 20
spaces between tokens), which a small model does until ``max_tokens`` without this note."""


async def ask(client: LLMClient, messages: list[dict], constraint: TurnConstraint, **kwargs) -> Completion:
    """One turn under ``constraint`` in the form the client's endpoint takes; the reply always
    comes back in the token syntax."""
    if client.config.constrained == "json_schema":
        system, *rest = messages
        noted = [{**system, "content": f"{system['content']}\n\n{JSON_REPLY_NOTE}"}, *rest]
        comp = await client.complete(noted, json_schema=constraint.schema, schema_name=constraint.name, **kwargs)
        return replace(comp, text=json_turn_text(comp.text))
    return await client.complete(messages, constraint.grammar, **kwargs)
