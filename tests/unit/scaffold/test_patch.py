"""Structured scaffold patches: a structural patch applies; wording-only, unknown, unsafe and malformed ones are rejected."""

import json

import pytest

from automem_dagster.memory import OpName
from automem_dagster.scaffold import load_scaffold, structural_changes
from automem_dagster.scaffold.patch import (
    PatchRejected,
    ScaffoldPatch,
    apply_patch,
    parse_patch,
    patch_json_schema,
)

RATIONALE = "diagnosis d1: map_notes.txt grew duplicate lines per cell and the agent looped in place"

KEYED_MAP = {
    "set_policies": {"map_notes.txt": {"mode": "keyed", "max_lines": 200, "prune_to": 100}},
    "enable_operations": ["UPSERT"],
    "signals": {"stuck": {"enabled": True}},
    "rationale": RATIONALE,
}


@pytest.fixture
def parent():
    return load_scaffold("crafter", "v0")


def test_structural_patch_applies_and_leaves_parent_unchanged(parent):
    before = parent.model_dump()
    reply = f"Here is the revision:\n```json\n{json.dumps(KEYED_MAP)}\n```\n"
    new = apply_patch(parent, parse_patch(reply), version=1, description="keyed map + stuck warning")

    assert (new.version, new.parent, new.description) == (1, 0, "keyed map + stuck warning")
    policy = new.file("map_notes.txt").policy
    assert (policy.mode, policy.max_lines, policy.prune_to) == ("keyed", 200, 100)
    assert OpName.UPSERT in new.operations and new.signals.stuck.enabled
    changes = structural_changes(parent, new)
    assert any(c.startswith("policy of map_notes.txt") for c in changes)
    assert "operations enabled: ['UPSERT']" in changes
    assert any(c.startswith("signals: stuck.enabled False -> True") for c in changes)
    assert parent.model_dump() == before


def test_wording_only_patch_rejected(parent):
    patch = ScaffoldPatch(log_prompt=parent.log_prompt + " Be brief.", rationale=RATIONALE)
    with pytest.raises(PatchRejected, match="wording only"):
        apply_patch(parent, patch, 1, "reworded")


def test_unknown_file_rejected(parent):
    with pytest.raises(PatchRejected, match=r"unknown files \['nope.txt'\]"):
        apply_patch(parent, ScaffoldPatch(remove_files=["nope.txt"], rationale=RATIONALE), 1, "x")


def test_adding_existing_and_removing_every_file_rejected(parent):
    existing = parent.files[0]
    with pytest.raises(PatchRejected, match="already in the parent"):
        apply_patch(parent, ScaffoldPatch(add_files=[existing], rationale=RATIONALE), 1, "x")
    every = ScaffoldPatch(remove_files=[f.name for f in parent.files], rationale=RATIONALE)
    with pytest.raises(PatchRejected, match="removes every file"):
        apply_patch(parent, every, 1, "x")


def test_disabling_all_writes_rejected(parent):
    patch = ScaffoldPatch(disable_operations=[OpName.APPEND, OpName.WRITE], rationale=RATIONALE)
    with pytest.raises(PatchRejected, match="enable at least one of APPEND, WRITE, UPSERT"):
        apply_patch(parent, patch, 1, "x")


def test_all_files_read_only_rejected(parent):
    synced = {"mode": "synced", "sync_source": "status"}
    patch = ScaffoldPatch.model_validate(
        {"set_policies": {f.name: synced for f in parent.files}, "rationale": RATIONALE}
    )
    with pytest.raises(PatchRejected, match="model-driven"):
        apply_patch(parent, patch, 1, "x")


def test_invalid_result_rejected_with_field(parent):
    patch = ScaffoldPatch.model_validate(
        {"set_policies": {"map_notes.txt": {"mode": "keyed"}}, "rationale": RATIONALE}
    )
    with pytest.raises(PatchRejected, match="needs the UPSERT operation enabled"):
        apply_patch(parent, patch, 1, "x")


def test_a_patch_revises_the_routine_and_an_invalid_one_is_refused_naming_the_field(parent):
    patch = parse_patch(json.dumps({"routine": {"log_every": 2, "reuse_consultation": False}, "rationale": RATIONALE}))
    new = apply_patch(parent, patch, 1, "x")
    assert (new.routine.log_every, new.routine.reuse_consultation, new.routine.log_triggers) == (
        2, False, parent.routine.log_triggers)
    assert structural_changes(parent, new) == ["routine: log_every 5 -> 2, reuse_consultation True -> False"]
    with pytest.raises(PatchRejected, match=r"routine\.log_every"):
        apply_patch(parent, ScaffoldPatch(routine={"log_every": 0}, rationale=RATIONALE), 1, "x")
    with pytest.raises(PatchRejected, match="unknown routine settings"):
        parse_patch(json.dumps({"routine": {"log_sometimes": True}, "rationale": RATIONALE}))
    with pytest.raises(PatchRejected, match="wording only"):
        apply_patch(parent, ScaffoldPatch(routine={"log_every": parent.routine.log_every}, rationale=RATIONALE), 1, "x")


def test_oversized_patch_rejected(parent):
    files = [{"name": f"f{i}.txt", "purpose": "p"} for i in range(21)]
    patch = ScaffoldPatch.model_validate({"add_files": files, "rationale": RATIONALE})
    with pytest.raises(PatchRejected, match="oversized patch: touches 21 files"):
        apply_patch(parent, patch, 1, "x")


def test_malformed_json_rejected():
    with pytest.raises(PatchRejected, match="not valid JSON"):
        parse_patch('```json\n{"rationale": \n```')
    with pytest.raises(PatchRejected, match="must be a JSON object"):
        parse_patch("[1, 2]")


def test_off_schema_json_rejected_naming_fields():
    with pytest.raises(PatchRejected, match="rename_files"):
        parse_patch(json.dumps({"rename_files": ["a"], "rationale": RATIONALE}))
    with pytest.raises(PatchRejected, match="unknown limits"):
        parse_patch(json.dumps({"limits": {"turbo": 3}, "rationale": RATIONALE}))
    with pytest.raises(PatchRejected, match="rationale"):
        parse_patch(json.dumps({"enable_operations": ["UPSERT"]}))


def test_json_schema_names_the_fields():
    schema = patch_json_schema()
    assert isinstance(schema, dict)
    assert {"log_prompt", "add_files", "set_policies", "enable_operations", "limits", "signals", "routine",
            "rationale"} <= set(
        schema["properties"]
    )
    assert schema["required"] == ["rationale"]
    assert schema["additionalProperties"] is False
