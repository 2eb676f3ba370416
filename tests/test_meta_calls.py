"""The meta-LLM's two calls: schemas narrowed to the batch and the parent, replies parsed as untrusted text."""

import asyncio
import json

import pytest
from builders import scripted_client
from test_evidence import _step, _turn, _write

from automem_dagster.datafiles import parse_json_reply
from automem_dagster.llm.strict_schema import strict_violations
from automem_dagster.meta.compress import render_for_diagnosis
from automem_dagster.meta.diagnose import batch_reply_schema, diagnose
from automem_dagster.meta.diagnosis_record import DiagnosisError, DiagnosisReply
from automem_dagster.meta.evidence import collect_evidence
from automem_dagster.meta.revise import STRUCTURAL_FIELDS, propose_revision, revision_messages, revision_schema
from automem_dagster.scaffold import load_scaffold
from automem_dagster.scaffold.patch import ScaffoldPatch


def write_episode(folder, episode, steps):
    folder.mkdir(parents=True, exist_ok=True)
    return _write(folder, episode, [_step("noop", (0, 0), [_turn("plan", 10)]) for _ in range(steps)])


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


def _batch(tmp_path, steps):
    """A batch directory with one finished Crafter episode of ``steps`` idle steps."""
    batch = tmp_path / "batch"
    write_episode(batch / "trajectories", "crafter__seed7", steps)
    return batch


def _diagnosis(step):
    return json.dumps({"summary": "It idled for the whole episode.", "findings": [
        {"episode": "crafter__seed7", "step": step, "kind": "stuck", "what_happened": "noop", "scaffold_cause": "no warning",
         "proposed_change": "enable the stuck signal"}]})


def _client(server, **overrides):
    return scripted_client(server, base_url="unused", **overrides)


def test_a_diagnosis_that_never_cites_the_batch_fails_and_keeps_the_replies(tmp_path, scripted):
    batch = _batch(tmp_path, 3)
    server = scripted([{"match": "Diagnose this batch", "replies": ["not json", _diagnosis(99)]}])
    with pytest.raises(DiagnosisError, match="no usable diagnosis in 2 attempts") as err:
        asyncio.run(diagnose(batch, load_scaffold("crafter", 0), _client(server), tmp_path / "out", max_attempts=2))
    kept = json.loads((tmp_path / "out" / "diagnosis_failed.json").read_text())
    assert not (tmp_path / "out" / "diagnosis.json").exists()
    assert "not valid JSON" in kept[0]["error"] and "crafter__seed7 has steps 0-2" in kept[1]["error"]
    assert str(tmp_path / "out" / "diagnosis_failed.json") in str(err.value)


def test_a_context_too_small_for_the_batch_is_named(tmp_path, scripted):
    batch = _batch(tmp_path, 3)
    server = scripted([])
    with pytest.raises(DiagnosisError, match="context_tokens 1024 leaves no room"):
        asyncio.run(diagnose(batch, load_scaffold("crafter", 0), _client(server, context_tokens=1024, max_tokens=700),
                             tmp_path / "out"))


def test_a_rejected_patch_is_asked_again_with_its_reason(tmp_path, scripted):
    good = json.dumps({"enable_operations": ["UPSERT"], "rationale": "Finding 1: map lines are rewritten again and again."})
    server = scripted([{"match": "That patch was rejected: wording only", "reply": good},
                       {"match": "Propose one patch", "reply": json.dumps({"rationale": "Reworded the prompts only."})}])
    revision = asyncio.run(propose_revision(load_scaffold("crafter", 0), "## Findings", tmp_path, _client(server), 1))
    assert revision.accepted and revision.version == 1 and len(revision.attempts) == 2
    assert "wording only" in revision.attempts[0].error and revision.attempts[1].error is None
    assert revision.changes == ["operations enabled: ['UPSERT']"]
    out = revision.save(tmp_path / "rev")
    assert "- UPSERT" in (out / "candidate.yaml").read_text()


def test_a_third_attempt_fits_a_context_that_holds_the_request_and_one_rejected_reply(tmp_path, scripted):
    # The embedded meta (4096 tokens) refused a third revision attempt that carried both earlier rejected
    # replies (4281 tokens). Here the context holds the request and one long rejected reply, never two.
    scaffold = load_scaffold("crafter", 0)
    request = "\n".join(m["content"] for m in revision_messages(scaffold, "## Findings"))
    wordy = json.dumps({"rationale": "Reworded the prompts only. " + "The map lines are rewritten. " * 60})
    good = json.dumps({"enable_operations": ["UPSERT"], "rationale": "Finding 1: map lines are rewritten again and again."})
    context = len(request) + len(wordy) + 600
    server = scripted([{"over_chars": context, "status": 400,
                        "error": f"request ({context} tokens) exceeds the available context size ({context} tokens)"},
                       {"match": "Propose one patch", "replies": [wordy, wordy, good]}])
    revision = asyncio.run(propose_revision(scaffold, "## Findings", tmp_path, _client(server), 1))
    assert revision.accepted and [a.error is None for a in revision.attempts] == [False, False, True]


def test_a_prompt_over_the_context_is_compressed_further_and_sent_again(tmp_path, scripted):
    batch = _batch(tmp_path, 40)
    reply = _diagnosis(3)
    # The server refuses any prompt still holding step 30 verbatim, as a server refuses a prompt over its context.
    server = scripted([{"match": "--- step 30", "status": 400,
                        "error": "request (4140 tokens) exceeds the available context size (4096 tokens)"},
                       {"match": "Diagnose this batch", "reply": reply}])
    result = asyncio.run(diagnose(batch, load_scaffold("crafter", 0), _client(server, context_tokens=8192),
                                  tmp_path / "out"))
    assert len(result.attempts) == 1 and result.findings[0]["step"] == 3
    assert any("over the budget" in note for note in result.compression_notes)
