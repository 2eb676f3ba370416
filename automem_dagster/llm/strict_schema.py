"""JSON schemas in the subset every structured-output backend accepts: OpenAI's strict mode.

OpenAI's Structured Outputs with ``strict: true`` (platform.openai.com/docs/guides/structured-outputs,
"Supported schemas") accept only a subset of JSON Schema, and vLLM (xgrammar, outlines) and
llama.cpp (``json_schema_to_grammar``) accept that subset too, so one schema serves them all:

* the root is an object, not ``anyOf``;
* every object sets ``additionalProperties: false`` and lists every property in ``required``
  (an optional field is required and nullable: ``null`` means "absent");
* only these keywords: ``type``, ``properties``, ``required``, ``additionalProperties``,
  ``items``, ``enum``, ``const``, ``anyOf``, ``$ref``/``$defs``, ``description``, ``title``;
  strings ``pattern`` and ``format``; numbers ``minimum``, ``maximum``, ``exclusiveMinimum``,
  ``exclusiveMaximum``, ``multipleOf``; arrays ``minItems``, ``maxItems``. Not ``minLength``,
  ``maxLength``, ``uniqueItems``, ``minProperties``, ``maxProperties``, ``allOf``, ``not``,
  ``if``/``then``/``else``, ``patternProperties``, ``default``;
* at most 5,000 object properties and 10 levels of nesting, at most 1,000 enum values in all,
  at most 120,000 characters of property names, definition names, enum and const values, and
  for one string enum of more than 250 values at most 15,000 characters.

``to_strict`` rewrites the schemas the project builds (pydantic's, narrowed by hand) into this
subset: it inlines ``$ref``, makes optional fields nullable, turns a length bound into a
``pattern`` over printable ASCII (small models need every free-text field bounded, and a bound
is also what keeps llama.cpp's grammar from looping), and drops what strict mode refuses.
``strict_violations`` checks a schema against the rules above, independently of how it was
made: the tests run it over every schema the project sends, and the scripted provider server
refuses a request with OpenAI's error when it finds one.
"""

from __future__ import annotations

import copy
from typing import Any

STRING_KEYWORDS = {"pattern", "format"}
NUMBER_KEYWORDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
ARRAY_KEYWORDS = {"items", "minItems", "maxItems"}
OBJECT_KEYWORDS = {"properties", "required", "additionalProperties"}
COMMON_KEYWORDS = {"type", "enum", "const", "anyOf", "$ref", "$defs", "description", "title"}
SUPPORTED = STRING_KEYWORDS | NUMBER_KEYWORDS | ARRAY_KEYWORDS | OBJECT_KEYWORDS | COMMON_KEYWORDS

MAX_PROPERTIES = 5_000
MAX_DEPTH = 10
MAX_ENUM_VALUES = 1_000
MAX_NAME_CHARS = 120_000
LARGE_ENUM = 250
LARGE_ENUM_CHARS = 15_000

_DROPPED = {"default", "examples", "uniqueItems", "minProperties", "maxProperties", "minLength", "maxLength"}
TEXT_CHARS = r"[ -!#-\[\]-~]"
"""Printable ASCII but ``"`` and ``\\``: text that needs no escaping inside a JSON string, so a
backend that copies a pattern into its grammar (llama.cpp) still emits valid JSON."""


def bounded_text(max_chars: int, min_chars: int = 0, chars: str = TEXT_CHARS) -> dict[str, str]:
    """A string of ``min_chars`` to ``max_chars`` characters of the class ``chars`` (a regex
    character class needing no JSON escapes), as a strict-mode pattern."""
    return {"type": "string", "pattern": f"^{chars}{{{min_chars},{max_chars}}}$"}


def to_strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` rewritten into the strict subset (see the module docstring); the input is not changed."""
    defs = schema.get("$defs", {})
    out = _strict(copy.deepcopy({k: v for k, v in schema.items() if k != "$defs"}), defs, depth=0)
    if out.get("type") != "object":
        raise ValueError("a strict schema's root must be an object: wrap the reply in one")
    return out


def _resolve(node: dict, defs: dict) -> dict:
    ref = node.get("$ref")
    if ref is None:
        return node
    name = ref.rsplit("/", 1)[-1]
    if name not in defs:
        raise ValueError(f"unresolvable $ref {ref}")
    merged = {**copy.deepcopy(defs[name]), **{k: v for k, v in node.items() if k != "$ref"}}
    return _resolve(merged, defs)


def _strict(node: dict, defs: dict, depth: int) -> dict:
    if depth > 50:
        raise ValueError("schema nests too deeply (a recursive $ref?)")
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    if ("maxLength" in node or "minLength" in node) and "pattern" not in node:
        out.update(bounded_text(node.get("maxLength", 10_000), node.get("minLength", 0)))
    for key, value in node.items():
        if key in _DROPPED or key in out:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {name: _strict(sub, defs, depth + 1) for name, sub in value.items()}
        elif key in ("items",):
            out[key] = _strict(value, defs, depth + 1)
        elif key == "anyOf":
            out[key] = [_strict(sub, defs, depth + 1) for sub in value]
        elif key == "additionalProperties" and isinstance(value, dict):
            raise ValueError("strict mode has no free-form maps (additionalProperties with a schema): list the keys")
        else:
            out[key] = value
    if out.get("type") == "object":
        props = out.setdefault("properties", {})
        required = set(node.get("required", []))
        for name, sub in props.items():
            if name not in required and not _nullable(sub):
                props[name] = {"anyOf": [sub, {"type": "null"}]}
        out["required"] = list(props)
        out["additionalProperties"] = False
    return out


def _nullable(node: dict) -> bool:
    kinds = node.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    return any(_nullable(sub) for sub in node.get("anyOf", []))


def strict_violations(schema: dict[str, Any]) -> list[str]:
    """Every way ``schema`` breaks OpenAI's strict-mode rules, as ``path: problem`` lines (empty: it fits)."""
    problems: list[str] = []
    if schema.get("type") != "object" or "anyOf" in schema:
        problems.append("(root): the root must be an object, not anyOf")
    totals = {"properties": 0, "enum_values": 0, "chars": 0}
    defs = schema.get("$defs", {})
    totals["chars"] += sum(len(name) for name in defs)
    _check(schema, "(root)", 1, problems, totals)
    for name, sub in defs.items():
        _check(sub, f"$defs.{name}", 1, problems, totals)
    if totals["properties"] > MAX_PROPERTIES:
        problems.append(f"(root): {totals['properties']} object properties, over the limit of {MAX_PROPERTIES}")
    if totals["enum_values"] > MAX_ENUM_VALUES:
        problems.append(f"(root): {totals['enum_values']} enum values, over the limit of {MAX_ENUM_VALUES}")
    if totals["chars"] > MAX_NAME_CHARS:
        problems.append(f"(root): {totals['chars']} characters of names and enum values, over {MAX_NAME_CHARS}")
    return problems


def _check(node: dict, path: str, depth: int, problems: list[str], totals: dict) -> None:
    if not isinstance(node, dict):
        problems.append(f"{path}: a schema must be an object")
        return
    for key in node:
        if key not in SUPPORTED:
            problems.append(f"{path}: keyword {key!r} is not supported in strict mode")
    if "$ref" in node and len(node) > 1:
        problems.append(f"{path}: $ref may not have sibling keywords")
    kinds = node.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "object" in kinds or "properties" in node:
        if depth > MAX_DEPTH:
            problems.append(f"{path}: objects nest {depth} deep, over the limit of {MAX_DEPTH}")
        if node.get("additionalProperties") is not False:
            problems.append(f"{path}: 'additionalProperties' is required to be supplied and to be false")
        props = node.get("properties", {})
        missing = [name for name in props if name not in node.get("required", [])]
        if missing:
            problems.append(f"{path}: 'required' is required to include every property; missing {missing}")
        totals["properties"] += len(props)
        totals["chars"] += sum(len(name) for name in props)
        for name, sub in props.items():
            _check(sub, f"{path}.{name}", depth + 1, problems, totals)
    enum = node.get("enum", [])
    if "enum" in node and not enum:
        problems.append(f"{path}: enum must be a non-empty array")
    if "const" in node:
        totals["chars"] += len(str(node["const"]))
    totals["enum_values"] += len(enum)
    enum_chars = sum(len(str(v)) for v in enum)
    totals["chars"] += enum_chars
    if len(enum) > LARGE_ENUM and enum_chars > LARGE_ENUM_CHARS:
        problems.append(f"{path}: an enum of {len(enum)} values may total at most {LARGE_ENUM_CHARS} characters")
    if "items" in node:
        _check(node["items"], f"{path}[]", depth, problems, totals)
    for i, sub in enumerate(node.get("anyOf", [])):
        _check(sub, f"{path}.anyOf[{i}]", depth, problems, totals)
