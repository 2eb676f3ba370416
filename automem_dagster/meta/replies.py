"""Every meta-LLM call is kept for the record, accepted or not, so a bad diagnosis or revision
can be read back instead of vanishing (parsing is ``datafiles.parse_json_reply``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from automem_dagster.llm.client import Completion


@dataclass(frozen=True)
class Attempt:
    """One meta-LLM call: its reply, why it was not accepted (None when it was), and its cost."""

    reply: str
    error: str | None
    input_tokens: int
    output_tokens: int
    latency_s: float

    @classmethod
    def of(cls, completion: Completion, error: str | None) -> Attempt:
        return cls(completion.text, error, completion.input_tokens, completion.output_tokens, round(completion.latency_s, 3))


def ask_again(messages: list[dict], request_len: int, rejected: str, correction: str) -> None:
    """Turn ``messages`` into the next attempt's conversation: its first ``request_len`` messages (the
    request), the latest rejected reply and ``correction`` (why it was rejected). Earlier rejected
    replies are dropped: each may be ``max_tokens`` long, and a conversation that kept them all
    outgrew the embedded meta's 4096-token context on the third attempt (HTTP 400, 4281 tokens),
    ending the round where a retry was due."""
    del messages[request_len:]
    messages += [{"role": "assistant", "content": rejected}, {"role": "user", "content": correction}]


ENUM_SHOWN = 12
"""Allowed values listed in a field's description at most; a longer enum is described by its count."""


def describe_reply(schema: dict) -> str:
    """The reply's JSON schema as prose for the prompt: every field by name, with its type and bounds.

    Some providers take ``response_format`` and decode without it (Anthropic's OpenAI-compatible
    layer lists it as ignored, docs.anthropic.com/en/api/openai-sdk), so the model learns the
    reply's shape only from the prompt; the reply is validated against the schema either way."""
    lines = ["Reply with one JSON object and nothing else, with exactly these fields:"]
    lines += _fields(schema, schema, 0)
    return "\n".join(lines)


def _fields(node: dict, root: dict, depth: int) -> list[str]:
    node = _resolve(node, root)
    lines = []
    for name, prop in (node.get("properties") or {}).items():
        prop = _resolve(prop, root)
        lines.append(f"{'  ' * depth}- \"{name}\": {_kind(prop, root)}")
        item = _resolve(prop.get("items") or {}, root) if prop.get("type") == "array" else prop
        if item.get("properties"):
            lines += _fields(item, root, depth + 1)
    return lines


def _resolve(node: dict, root: dict) -> dict:
    """``node`` with a ``$ref`` followed and a nullable ``anyOf`` reduced to its non-null branch."""
    if "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    branches = [b for b in node.get("anyOf", []) if b.get("type") != "null"]
    return _resolve(branches[0], root) if len(branches) == 1 else node


def _kind(prop: dict, root: dict) -> str:
    """One field's type and bounds in words."""
    if "enum" in prop:
        values = prop["enum"]
        return (f"one of {', '.join(json.dumps(v) for v in values)}" if len(values) <= ENUM_SHOWN
                else f"{prop.get('type', 'value')}, one of {len(values)} allowed values")
    kind = prop.get("type", "value")
    bounds = []
    length = re.search(r"\{(\d+),(\d+)\}\$$", prop.get("pattern", ""))
    if length:  # strict schemas bound free text by a pattern (llm/strict_schema.py)
        bounds.append(f"{length[1]}-{length[2]} characters, printable ASCII, no quote or backslash")
    elif "minLength" in prop or "maxLength" in prop:
        bounds.append(f"{prop.get('minLength', 0)}-{prop.get('maxLength', 'any')} characters")
    if "minimum" in prop or "maximum" in prop:
        bounds.append(f"{prop.get('minimum', 'any')}-{prop.get('maximum', 'any')}")
    if kind == "array":
        item = _resolve(prop.get("items") or {}, root)
        count = f"{prop.get('minItems', 0)}-{prop.get('maxItems', 'any')} "
        inner = "objects with these fields:" if item.get("properties") else _kind(item, root)
        return f"array of {count}{inner}"
    return kind + (f" ({', '.join(bounds)})" if bounds else "") + (" with these fields:" if prop.get("properties") else "")
