"""The meta-LLM's two calls: schemas narrowed to the batch and the parent, replies parsed as untrusted text."""

import json

from meta_call_batches import write_episode

from automem_dagster.datafiles import parse_json_reply
from automem_dagster.llm.strict_schema import strict_violations
from automem_dagster.meta.compress import render_for_diagnosis
from automem_dagster.meta.diagnose import batch_reply_schema
from automem_dagster.meta.diagnosis_record import DiagnosisReply
from automem_dagster.meta.evidence import collect_evidence
from automem_dagster.meta.revise import STRUCTURAL_FIELDS, revision_schema
from automem_dagster.scaffold import load_scaffold
from automem_dagster.scaffold.patch import ScaffoldPatch


def test_parse_json_reply_names_what_is_wrong():
    assert parse_json_reply("", DiagnosisReply) == (None, "the reply is empty")
    assert "not valid JSON" in parse_json_reply("{oops", DiagnosisReply)[1]
    assert "must be a JSON object" in parse_json_reply("[1]", DiagnosisReply)[1]
    assert "findings" in parse_json_reply('{"summary": "long enough summary"}', DiagnosisReply)[1]
    fenced = '```json\n{"rationale": "twenty characters or more here", "limits": {"log_max_ops": 2}}\n```'
    patch, error = parse_json_reply(fenced, ScaffoldPatch)
    assert error is None and patch.limits == {"log_max_ops": 2}


def _present(schema: dict) -> dict:
    """The non-null branch of a strict schema's optional (nullable) property."""
    branches = [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]
    assert len(branches) == 1
    return branches[0]


def test_revision_schema_is_narrowed_to_the_parent():
    parent = load_scaffold("crafter", 0)
    schema = revision_schema(parent)
    assert strict_violations(schema) == []
    alternatives = schema["properties"]["patch"]["anyOf"]
    by_field = {}
    for alt in alternatives:
        # the one structural field an alternative stands for is the only one that is not nullable
        fields = [k for k, v in alt["properties"].items() if k != "rationale" and "anyOf" not in v]
        assert len(fields) == 1, fields
        by_field[fields[0]] = alt["properties"]
    assert set(by_field) <= set(STRUCTURAL_FIELDS) and "enable_operations" in by_field
    props = by_field["enable_operations"]
    enable = props["enable_operations"]["items"]["enum"]
    assert "UPSERT" in enable and props["enable_operations"]["minItems"] == 1
    assert not set(enable) & {op.value for op in parent.operations}
    assert "READ" not in _present(props["disable_operations"])["items"]["enum"]
    policies = _present(props["set_policies"])
    assert set(policies["properties"]) == set(parent.model_writable_files())
    # Inside the structural field, only values that differ from the parent can be written.
    limits = by_field["limits"]["limits"]["properties"]
    assert _present(limits["log_max_ops"])["anyOf"] == [
        {"type": "integer", "minimum": 0, "maximum": parent.limits.log_max_ops - 1},
        {"type": "integer", "minimum": parent.limits.log_max_ops + 1, "maximum": 20}]
    stuck = _present(by_field["signals"]["signals"]["properties"]["stuck"])
    assert stuck["properties"]["enabled"] == {"type": "boolean", "enum": [True]}
    some_file = parent.model_writable_files()[0]
    modes = _present(policies["properties"][some_file])["properties"]["mode"]["enum"]
    assert parent.file(some_file).policy.mode not in modes and len(modes) == 4
    routine = by_field["routine"]["routine"]["properties"]
    assert _present(routine["log_every"])["anyOf"] == [
        {"type": "integer", "minimum": 1, "maximum": parent.routine.log_every - 1},
        {"type": "integer", "minimum": parent.routine.log_every + 1, "maximum": 100}]
    assert _present(routine["reuse_consultation"]) == {"type": "boolean", "enum": [False]}
    assert _present(routine["log_triggers"])["items"]["enum"] == ["reward", "inventory", "level", "position"]
    json.dumps(schema)  # serialisable as a response_format


def test_a_strict_revision_reply_with_nulls_and_a_bare_patch_both_parse():
    from automem_dagster.meta.revise import parse_revision_reply

    wrapped = json.dumps({"patch": {"enable_operations": ["UPSERT"], "rationale": "the map is rewritten every step",
                                    "add_files": None, "limits": None, "log_prompt": None}})
    patch, error = parse_revision_reply(wrapped)
    assert error is None and patch.enable_operations == ["UPSERT"] and patch.add_files == []
    bare = json.dumps({"disable_operations": ["COUNT"], "rationale": "COUNT never helped in any episode"})
    bare, error = parse_revision_reply(bare)
    assert error is None and bare.disable_operations == ["COUNT"]
    none, error = parse_revision_reply(json.dumps({"patch": {"rationale": "x"}}))
    assert none is None and "rationale" in error


def test_reply_schema_lists_the_batch_episodes(tmp_path):
    paths = [write_episode(tmp_path, "crafter__seed7", 4),
             write_episode(tmp_path, "crafter__seed8", 6)]
    schema = batch_reply_schema(collect_evidence(paths))
    assert strict_violations(schema) == []
    finding = schema["properties"]["findings"]["items"]["properties"]
    assert finding["episode"]["enum"] == ["crafter__seed7", "crafter__seed8"]
    assert finding["step"] == {"type": "integer", "minimum": 0, "maximum": 5}


def test_a_compressed_batch_narrows_the_steps_a_reply_may_cite_to_those_shown(tmp_path):
    paths = [write_episode(tmp_path, "crafter__seed7", 40)]
    evidence = collect_evidence(paths)
    rendered = render_for_diagnosis(paths, evidence, 400)
    shown = sorted(rendered.shown["crafter__seed7"])
    assert rendered.compressed and 0 < len(shown) < 40
    schema = batch_reply_schema(evidence, rendered)
    assert schema["properties"]["findings"]["items"]["properties"]["step"] == {"type": "integer", "enum": shown}
    assert strict_violations(schema) == []
    whole = render_for_diagnosis(paths, evidence, 10**6)
    assert batch_reply_schema(evidence, whole)["properties"]["findings"]["items"]["properties"]["step"]["maximum"] == 39
