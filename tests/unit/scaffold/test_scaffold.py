"""Scaffold files: every shipped v0 validates; errors name the field; save, hash and diff behave."""

import hashlib
import json

import pytest
import yaml

from automem_dagster.memory import FilePolicy, OpName
from automem_dagster.scaffold import (
    Routine,
    ScaffoldError,
    content_hash,
    diff_scaffolds,
    list_versions,
    load_scaffold,
    load_scaffold_file,
    parse_scaffold,
    revision_changes,
    save_scaffold,
    scaffold_path,
    structural_changes,
)

FAMILIES = ("crafter", "minihack", "nethack", "babyai", "textworld")


@pytest.mark.parametrize("game", FAMILIES)
def test_v0_loads_and_follows_automem_v0(game):
    scaffold = load_scaffold(game, "v0")
    assert scaffold.version == 0 and scaffold.parent is None and scaffold.game == game
    names = {f.name for f in scaffold.files}
    assert {"actions_log.txt", "strategy.txt"} <= names
    # v0 has none of the structure the winning scaffolds added
    assert OpName.UPSERT not in scaffold.operations
    assert not scaffold.signals.stuck.enabled and not scaffold.signals.oscillation.enabled
    assert all(f.policy.mode in ("free", "reference") for f in scaffold.files)
    assert 0 in list_versions(game)


@pytest.mark.parametrize("game", FAMILIES)
def test_v0_states_the_memory_routine_as_data(game):
    """Every shipped v0 writes its routine out (not left to a default), and it is the harness's rules of
    before the routine became scaffold data: a LOG at most every 5 steps, at once after a reward or a
    change of inventory or level, and a consultation reused while the memory files are unchanged."""
    stated = yaml.safe_load(scaffold_path(game, 0).read_text())["routine"]
    assert stated == {"log_every": 5, "log_triggers": ["reward", "inventory", "level"], "reuse_consultation": True}
    assert load_scaffold(game, 0).routine == Routine()


def test_v0_files_match_reference():
    assert {f.name for f in load_scaffold("crafter", 0).files} == {
        "map_notes.txt", "crafting_progress.txt", "survival_log.txt", "actions_log.txt", "strategy.txt"}
    nethack = {f.name for f in load_scaffold("nethack", 0).files}
    assert nethack == {"game_rules.txt", "nethack_symbols.txt", "dungeon_map.txt", "monster_encounters.txt",
                       "inventory.txt", "actions_log.txt", "strategy.txt"}
    assert {f.name for f in load_scaffold("minihack", 0).files} == nethack - {"monster_encounters.txt"}
    for game in ("nethack", "minihack"):
        s = load_scaffold(game, 0)
        assert s.file("game_rules.txt").policy.mode == "reference" and s.file("game_rules.txt").initial


def _data(game="crafter"):
    return load_scaffold(game, 0).model_dump(mode="json")


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.update(operations=["APPEND", "FLY"]), "operations"),
        (lambda d: d.update(operations=["APPEND"]), "READ must be enabled"),
        (lambda d: d["files"].append(dict(d["files"][0])), "duplicate file names"),
        (lambda d: d["files"][0].update(name="../evil.txt"), "files.0.name"),
        (lambda d: d["files"][0].update(policy={"mode": "keyed"}), "needs the UPSERT"),
        (lambda d: d["files"][0].update(policy={"mode": "synced"}), "sync_source"),
        (lambda d: d["limits"].update(log_max_ops=-1), "limits.log_max_ops"),
        (lambda d: d["limits"].update(plan_max_ops=1, plan_min_reads=2), "plan_min_reads 2 exceeds plan_max_ops 1"),
        (lambda d: d.update(parent=3), "parent"),
        (lambda d: d.update(colour="blue"), "colour"),
        (lambda d: d.update(log_prompt="short"), "log_prompt"),
        (lambda d: d["routine"].update(log_every=0), "routine.log_every"),
        (lambda d: d["routine"].update(log_triggers=["reward", "weather"]), "routine.log_triggers.1"),
        (lambda d: d["routine"].update(log_triggers=["level", "level"]), "routine.log_triggers"),
        (lambda d: d["routine"].update(reuse_consultation="sometimes"), "routine.reuse_consultation"),
        (lambda d: d["routine"].update(log_after="reward"), "routine.log_after"),
    ],
)
def test_invalid_scaffolds_name_the_field(mutate, field):
    data = _data()
    mutate(data)
    with pytest.raises(ScaffoldError, match="invalid") as err:
        parse_scaffold(data, "test.yaml")
    assert field in str(err.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ScaffoldError, match="does not exist"):
        load_scaffold("crafter", "v99", root=tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("game: [unclosed")
    with pytest.raises(ScaffoldError, match="not valid YAML"):
        load_scaffold_file(bad)
    with pytest.raises(ScaffoldError, match="not a version"):
        scaffold_path("crafter", "latest")


def test_save_roundtrip_hash_and_immutability(tmp_path):
    s0 = load_scaffold("crafter", 0)
    path = save_scaffold(s0, root=tmp_path)
    assert path == tmp_path / "crafter" / "v0.yaml"
    again = load_scaffold("crafter", 0, root=tmp_path)
    assert again == s0 and content_hash(again) == content_hash(s0)
    # lineage metadata does not change the content hash; content does
    relabelled = s0.model_copy(update={"version": 1, "parent": 0, "description": "same"})
    assert content_hash(relabelled) == content_hash(s0)
    changed = s0.model_copy(update={"version": 1, "parent": 0, "operations": [*s0.operations, OpName.UPSERT]})
    assert content_hash(changed) != content_hash(s0)
    with pytest.raises(ScaffoldError, match="immutable"):
        save_scaffold(changed.model_copy(update={"version": 0, "parent": None}), root=tmp_path)
    assert not list((tmp_path / "crafter").glob("*.tmp"))


def test_a_routine_change_is_structural_and_changes_the_hash():
    """The routine decides which memory decisions exist, so changing it is a structural revision
    that a diff names, and the content hash (which names the batches played) follows it."""
    s0 = load_scaffold("crafter", 0)
    s1 = s0.model_copy(update={"version": 1, "parent": 0,
                               "routine": Routine(log_every=1, log_triggers=["reward", "position"])})
    assert structural_changes(s0, s1) == [
        "routine: log_every 5 -> 1, log_triggers ['reward', 'inventory', 'level'] -> ['reward', 'position']"]
    assert content_hash(s1) != content_hash(s0)
    assert "-  log_every: 5" in diff_scaffolds(s0, s1) and "+  log_every: 1" in diff_scaffolds(s0, s1)


def test_diff_lists_structural_changes():
    s0 = load_scaffold("crafter", 0)
    files = [f.model_copy(update={"policy": FilePolicy(mode="keyed", max_lines=200, prune_to=100)})
             if f.name == "map_notes.txt" else f for f in s0.files]
    s1 = s0.model_copy(update={
        "version": 1, "parent": 0, "files": files, "operations": [*s0.operations, OpName.UPSERT],
        "signals": s0.signals.model_copy(update={"stuck": s0.signals.stuck.model_copy(update={"enabled": True})}),
    })
    changes = structural_changes(s0, s1)
    assert any(c.startswith("policy of map_notes.txt") for c in changes)
    assert "operations enabled: ['UPSERT']" in changes
    assert any("stuck.enabled False -> True" in c for c in changes)
    md = diff_scaffolds(s0, s1)
    assert "```diff" in md and "+- UPSERT" in md
    wording = s0.model_copy(update={"version": 1, "parent": 0, "log_prompt": s0.log_prompt + " Be brief."})
    assert structural_changes(s0, wording) == []
    assert "wording only" in diff_scaffolds(s0, wording)
    # A revision's change list (a round's summary) names rewritten wording after the structure, so a
    # replaced prompt shows beside the structural change that got the patch accepted.
    n = len(s0.log_prompt)
    assert revision_changes(s0, wording) == [f"log_prompt rewritten ({n:,} -> {n + 10:,} characters)"]
    reworded = s1.model_copy(update={"plan_prompt": "Plan.  " * 4,
                                     "files": [f.model_copy(update={"purpose": "notes"}) if f.name == "map_notes.txt"
                                               else f for f in s1.files]})
    changes = revision_changes(s0, reworded)
    assert changes[:-2] == structural_changes(s0, s1)
    assert changes[-2:] == [f"plan_prompt rewritten ({len(s0.plan_prompt):,} -> 28 characters)",
                            "purpose of map_notes.txt rewritten"]
    assert "- plan_prompt rewritten" in diff_scaffolds(s0, reworded)


def test_a_least_number_of_reads_is_structural_and_absent_from_the_hash_at_zero():
    """``limits.plan_min_reads`` came after scaffolds had been hashed: at 0 the hash is the one a scaffold
    had before the setting existed (its batches keep their identity); set, it is a structural change."""
    s0 = load_scaffold("crafter", 0)
    data = s0.model_dump(mode="json", exclude={"version", "parent", "description"})
    del data["limits"]["plan_min_reads"], data["limits"]["log_min_writes"]
    before = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    assert content_hash(s0) == before
    s1 = s0.model_copy(update={"version": 1, "parent": 0, "limits": s0.limits.model_copy(update={"plan_min_reads": 1})})
    assert content_hash(s1) != content_hash(s0)
    assert any("plan_min_reads" in change for change in structural_changes(s0, s1))
