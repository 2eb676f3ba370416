"""What a request carries: only what the endpoint file sets, no ``extra_body`` over the project's own
fields, schemas rewritten to OpenAI's strict subset (``llm/strict_schema.py``) and turn schemas that
stay valid and within the operation budget."""

import pytest
from chat_messages import HI

from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.client import request_body
from automem_dagster.llm.strict_schema import strict_violations, to_strict
from automem_dagster.scaffold import load_scaffold


def test_only_what_the_file_sets_is_sent():
    bare = request_body(EndpointConfig(name="m", base_url="http://x/v1", model="o-reasoner"), HI)
    assert set(bare) == {"model", "messages", "max_tokens"}
    cfg = EndpointConfig(name="m", base_url="http://x/v1", model="o", temperature=0.2, max_tokens_field="max_completion_tokens",
                         extra_body={"reasoning_effort": "low"})
    body = request_body(cfg, HI, json_schema={"type": "object"}, seed=7)
    assert body["temperature"] == 0.2 and "top_p" not in body and body["max_completion_tokens"] == 160
    assert "max_tokens" not in body and body["seed"] == 7 and body["extra_body"] == {"reasoning_effort": "low"}
    assert body["response_format"]["json_schema"]["strict"] is True
    none = request_body(cfg.model_copy(update={"constrained": "none"}), HI, json_schema={"type": "object"})
    assert "response_format" not in none


def test_extra_body_cannot_override_what_the_project_sets():
    with pytest.raises(ValueError, match="extra_body may not set"):
        EndpointConfig(name="m", extra_body={"model": "other"})


def test_to_strict_rewrites_what_strict_mode_refuses():
    loose = {"$defs": {"Item": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}},
                                "required": ["name"]}},
             "type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"},
                                                        "uniqueItems": True, "default": []},
                                              "flag": {"type": "boolean", "const": True}},
             "required": ["flag"]}
    assert len(strict_violations(loose)) >= 4
    strict = to_strict(loose)
    assert strict_violations(strict) == []
    items = strict["properties"]["items"]["anyOf"][0]
    assert items["items"]["properties"]["name"]["pattern"].endswith("{0,20}$")
    assert strict["properties"]["flag"] == {"type": "boolean", "enum": [True]}
    with pytest.raises(ValueError, match="root must be an object"):
        to_strict({"anyOf": [{"type": "object"}]})


def test_turn_schemas_stay_valid_when_the_model_has_deleted_every_file():
    """Found on the embedded server: a store emptied by DELETEs gave ``"enum": []``, which llama.cpp
    (and OpenAI) refuse; an operation with no file to act on is left out instead."""
    from automem_dagster.agent.turn_format import TurnFormats

    v0 = load_scaffold("crafter", 0)
    formats = TurnFormats(v0.operations, 32, 16, 16)
    for constraint in (formats.log_turn([], [], 3), formats.plan_turn([], ["noop", "do"], consult=True)):
        assert strict_violations(constraint.schema) == [], constraint.name
    assert strict_violations({"type": "object", "properties": {"f": {"type": "string", "enum": []}},
                              "required": ["f"], "additionalProperties": False})


def test_json_turns_cannot_exceed_the_operation_budget():
    """Found on the embedded server: writes past the budget ran past the cap, and the agent flagged
    turns the schema had allowed as malformed. LOG holds writes only; PLAN's reads are one list."""
    from automem_dagster.agent.turn_format import TurnFormats

    v0 = load_scaffold("crafter", 0)
    formats = TurnFormats(v0.operations, 32, 16, 16)
    files = [f.name for f in v0.files]
    for remaining in (1, 2, 5):
        assert formats.log_turn(files, files, remaining).schema["properties"] == {"writes": {
            "type": "array", "items": formats.log_turn(files, files, 1).schema["properties"]["writes"]["items"],
            "maxItems": remaining}}
        plan = formats.plan_turn(files, ["noop"], consult=True, reads=remaining).schema["properties"]["next"]["anyOf"]
        assert plan[0]["properties"]["reads"]["maxItems"] == remaining
