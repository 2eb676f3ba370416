"""Unit tests for the memory vocabulary, parser, file policies, store operations and journal."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from automem_dagster.games.base import SYNC_SOURCES
from automem_dagster.memory import (
    OP_SYNTAX,
    READ_ONLY_OPS,
    FilePolicy,
    Journal,
    MemoryLimits,
    MemoryStore,
    MemoryStoreError,
    Op,
    OpName,
    OpResult,
    format_op,
    parse_ops,
    validate_op,
)
from automem_dagster.memory.policy import WRITE_OPS, SyncSource


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "memory", journal=Journal(tmp_path / "logs" / "journal.jsonl"))


def run(store: MemoryStore, text: str, phase: str = "log") -> list[OpResult]:
    """The agent's path: model text -> parse_ops -> execute each op."""
    parsed = parse_ops(text)
    assert parsed.errors == []
    return [store.execute(op, phase) for op in parsed.ops]


def one(store: MemoryStore, text: str, phase: str = "log") -> OpResult:
    (result,) = run(store, text, phase)
    return result


# ----- parser ---------------------------------------------------------------------------


def test_parse_every_operation_with_noise_around() -> None:
    text = (
        "I think I should note this. <|CREATE|>notes.txt <|READ|>notes.txt\n"
        "then <|TAIL|>notes.txt|5<|SEARCH|>notes.txt|water\n"
        "<|COUNT|>notes.txt|tree<|APPEND|>notes.txt|found water at 3,4\n"
        "<|WRITE|>plan.txt|go north <|UPSERT|>map.txt|3,4|water <|DELETE|>old.txt\n"
        "<|SUMMARIZE|>map.txt <|DONE|> that is all"
    )
    parsed = parse_ops(text)
    assert parsed.errors == []
    assert parsed.action is None
    assert [(op.name, op.file, op.args) for op in parsed.ops] == [
        (OpName.CREATE, "notes.txt", ()),
        (OpName.READ, "notes.txt", ()),
        (OpName.TAIL, "notes.txt", ("5",)),
        (OpName.SEARCH, "notes.txt", ("water",)),
        (OpName.COUNT, "notes.txt", ("tree",)),
        (OpName.APPEND, "notes.txt", ("found water at 3,4",)),
        (OpName.WRITE, "plan.txt", ("go north",)),
        (OpName.UPSERT, "map.txt", ("3,4", "water")),
        (OpName.DELETE, "old.txt", ()),
        (OpName.SUMMARIZE, "map.txt", ()),
        (OpName.DONE, None, ()),
    ]
    assert parsed.ops[5].raw == "<|APPEND|>notes.txt|found water at 3,4"


def test_argument_ends_at_end_of_line_and_free_text_keeps_pipes() -> None:
    parsed = parse_ops("<|APPEND|>log.txt|a | b\nstray prose\n<|UPSERT|>map.txt| 1,2 | wall|door ")
    assert [op.args for op in parsed.ops] == [("a | b",), ("1,2", "wall|door")]


def test_token_names_are_case_insensitive() -> None:
    (op,) = parse_ops("<|read|>notes.txt").ops
    assert op.name is OpName.READ


def test_action_is_returned_separately() -> None:
    parsed = parse_ops("<|READ|>map.txt <|ACTION|> move_left <|END|> and <|DONE|>")
    assert parsed.action == "move_left"
    assert [op.name for op in parsed.ops] == [OpName.READ, OpName.DONE]


def test_action_without_end_token_runs_to_end_of_line() -> None:
    assert parse_ops("<|ACTION|>north\nmore text").action == "north"


def test_second_and_empty_actions_are_errors() -> None:
    parsed = parse_ops("<|ACTION|>north<|END|> <|ACTION|>south<|END|> <|ACTION|><|END|>")
    assert parsed.action == "north"
    assert len(parsed.errors) == 2
    assert "only one action" in parsed.errors[0] and "'north'" in parsed.errors[0]
    assert "empty action" in parsed.errors[1] and "<|ACTION|>action<|END|>" in parsed.errors[1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<|FLY|>notes.txt", "unknown operation 'FLY'"),
        ("<|READ|>notes.txt|extra", "too many arguments"),
        ("<|READ|>", "missing file name"),
        ("<|READ|>   ", "missing file name"),
        ("<|TAIL|>notes.txt", "missing N"),
        ("<|TAIL|>notes.txt|five", "N must be a whole number"),
        ("<|TAIL|>notes.txt|-3", "N must be a whole number"),
        ("<|TAIL|>notes.txt|1_000", "N must be a whole number"),
        ("<|TAIL|>notes.txt|" + "9" * 5000, "N must be a whole number"),
        ("<|TAIL|>notes.txt|0", "N must be at least 1"),
        ("<|TAIL|>notes.txt|3|4", "too many arguments"),
        ("<|APPEND|>notes.txt", "missing text"),
        ("<|APPEND|>notes.txt|   ", "missing text"),
        ("<|UPSERT|>map.txt|3,4", "missing text"),
        ("<|UPSERT|>map.txt| |wall", "missing key"),
        ("<|SEARCH|>notes.txt|", "missing keyword"),
    ],
)
def test_parser_errors_name_fragment_and_syntax(text: str, expected: str) -> None:
    parsed = parse_ops(text)
    assert parsed.ops == []
    (error,) = parsed.errors
    assert expected in error
    assert text.strip()[:20] in error
    assert "<|" in error.split(";")[-1]  # the expected syntax is quoted at the end


def test_parser_never_raises_on_junk() -> None:
    rng = random.Random(7)
    alphabet = "<|>abc|\n\x00é:/.\\ 0123456789" + "".join(op.value for op in OpName)
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        parse_ops(text)
        parse_ops("<|" + rng.choice(list(OpName)).value + "|>" + text)


def _random_op(rng: random.Random) -> Op:
    words = ["water", "3,4", "tree at 2,9", "a|b", "  spaced  ", "x", "stairs down", "é"]
    name = rng.choice(list(OpName))
    if name is OpName.DONE:
        return Op(name, None)
    file = rng.choice(["notes.txt", "map.txt", "log-1.md", "a"])
    if name is OpName.TAIL:
        return Op(name, file, (str(rng.randint(1, 500)),))
    if name is OpName.UPSERT:
        return Op(name, file, (rng.choice(["3,4", "stairs", "k 1"]), rng.choice(words).strip()))
    if name in (OpName.SEARCH, OpName.COUNT, OpName.APPEND, OpName.WRITE):
        return Op(name, file, (rng.choice(words).strip(),))
    return Op(name, file)


def test_format_then_parse_round_trips() -> None:
    rng = random.Random(11)
    ops = [_random_op(rng) for _ in range(300)]
    for op in ops:
        assert validate_op(op) is None
        (back,) = parse_ops(format_op(op)).ops
        assert (back.name, back.file, back.args) == (op.name, op.file, op.args)
    parsed = parse_ops("\nnoise ".join(format_op(op) for op in ops))
    assert [(op.name, op.file, op.args) for op in parsed.ops] == [(op.name, op.file, op.args) for op in ops]


def test_parse_then_format_reproduces_canonical_text() -> None:
    text = "<|UPSERT|>map.txt|3,4|water|deep"
    (op,) = parse_ops(text).ops
    assert format_op(op) == text
    assert format_op(Op(OpName.DONE, None)) == "<|DONE|>"


def test_op_syntax_lists_every_operation_on_one_line() -> None:
    assert set(OP_SYNTAX) == set(OpName)
    for name, line in OP_SYNTAX.items():
        assert line.startswith(f"<|{name.value}|>")
        assert "\n" not in line
    assert OP_SYNTAX[OpName.UPSERT].startswith("<|UPSERT|>file|key|text ")
    assert READ_ONLY_OPS == {OpName.READ, OpName.TAIL, OpName.SEARCH, OpName.COUNT, OpName.SUMMARIZE, OpName.DONE}


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (Op(OpName.DONE, "x"), "takes no arguments"),
        (Op(OpName.READ, None), "missing file name"),
        (Op(OpName.READ, "a", ("b",)), "expected 0 argument(s)"),
        (Op(OpName.UPSERT, "a", ("k|j", "v")), "must not contain '|'"),
        (Op(OpName.TAIL, "a", ("x",)), "whole number"),
    ],
)
def test_validate_op_rejects_hand_built_ops(op: Op, expected: str) -> None:
    assert expected in (validate_op(op) or "")


# ----- policy ---------------------------------------------------------------------------


def test_policy_defaults_prune_to_half_the_cap() -> None:
    assert FilePolicy().mode == "free"
    assert FilePolicy(max_lines=200).prune_to == 100
    assert FilePolicy(max_lines=1).prune_to == 0
    assert FilePolicy(max_lines=10, prune_to=9).prune_to == 9
    policy = FilePolicy(mode="keyed", max_lines=7)
    assert FilePolicy.model_validate(policy.model_dump()) == policy


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"max_lines": 0}, "max_lines"),
        ({"max_lines": 10, "prune_to": -1}, "prune_to"),
        ({"max_lines": 10, "prune_to": 10}, "prune_to"),
        ({"prune_to": 5}, "prune_to"),
        ({"mode": "synced"}, "sync_source"),
        ({"mode": "free", "sync_source": "inventory"}, "sync_source"),
        ({"mode": "synced", "sync_source": "weather"}, "sync_source"),
        ({"mode": "scratch"}, "mode"),
        ({"maxlines": 5}, "maxlines"),
    ],
)
def test_policy_errors_name_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ValidationError) as info:
        FilePolicy(**fields)
    assert named in str(info.value)


def test_sync_sources_match_the_game_state_renderer() -> None:
    assert set(get_args(SyncSource)) == set(SYNC_SOURCES)


@pytest.mark.parametrize(
    ("mode", "allowed"),
    [
        ("free", {OpName.APPEND, OpName.WRITE, OpName.UPSERT, OpName.DELETE}),
        ("append_only", {OpName.APPEND}),
        ("keyed", {OpName.UPSERT}),
        ("reference", set()),
        ("synced", set()),
    ],
)
def test_policy_write_matrix(mode: str, allowed: set[OpName]) -> None:
    policy = FilePolicy(mode=mode, sync_source="status" if mode == "synced" else None)
    for op in OpName:
        assert policy.allows(op) == (op in allowed or op not in WRITE_OPS)


def test_prune_keeps_newest_lines() -> None:
    policy = FilePolicy(max_lines=4, prune_to=2)
    assert policy.prune(["a", "b", "c", "d"]) == (["a", "b", "c", "d"], 0)
    assert policy.prune(["a", "b", "c", "d", "e"]) == (["d", "e"], 3)
    assert FilePolicy(max_lines=1).prune(["a", "b"]) == ([], 2)


# ----- store operations -----------------------------------------------------------------


def test_create_read_and_empty_file(store: MemoryStore) -> None:
    created = one(store, "<|CREATE|>notes.txt")
    assert created.ok and created.changed
    read = one(store, "<|READ|>notes.txt")
    assert read.ok and read.empty and read.text == "notes.txt is empty (0 lines)"   # showed no line
    assert one(store, "<|TAIL|>notes.txt|3").empty
    again = one(store, "<|CREATE|>notes.txt")
    assert again.ok and again.redundant and not again.changed


def test_missing_file_says_how_to_create_it(store: MemoryStore) -> None:
    for text in ("<|READ|>nope.txt", "<|APPEND|>nope.txt|x", "<|DELETE|>nope.txt"):
        result = one(store, text)
        assert not result.ok and "<|CREATE|>nope.txt" in result.text
    assert store.files() == []


def test_append_tail_search_count(store: MemoryStore) -> None:
    run(store, "<|CREATE|>log.txt\n" + "\n".join(f"<|APPEND|>log.txt|step {i}: Tree seen" for i in range(5)))
    assert store.read_text("log.txt").count("\n") == 5
    tail = one(store, "<|TAIL|>log.txt|2")
    assert tail.text.splitlines()[1:] == ["step 3: Tree seen", "step 4: Tree seen"]
    assert "last 2 of 5" in tail.text
    assert one(store, "<|TAIL|>log.txt|99").text.startswith("last 5 of 5")
    search = one(store, "<|SEARCH|>log.txt|TREE")
    assert search.ok and not search.empty and search.text.count("step") == 5
    none = one(store, "<|SEARCH|>log.txt|diamond")
    assert none.ok and none.empty and "no line" in none.text
    assert one(store, "<|COUNT|>log.txt|step 1").text.startswith("1 lines")
    assert one(store, "<|COUNT|>log.txt|zzz").empty


def test_append_of_existing_line_is_appended_but_flagged(store: MemoryStore) -> None:
    store.init_file("actions.txt", "", FilePolicy(mode="append_only"))
    first = one(store, "<|APPEND|>actions.txt|move north")
    second = one(store, "<|APPEND|>actions.txt|  move north ")
    assert not first.redundant and second.redundant and second.changed
    assert "redundant" in second.text
    assert store.read_text("actions.txt") == "move north\nmove north\n"


def test_write_replaces_and_flags_redundant(store: MemoryStore) -> None:
    store.init_file("plan.txt", "get wood\nget stone\n")
    result = one(store, "<|WRITE|>plan.txt|get stone")
    assert result.ok and result.redundant and result.changed
    assert store.read_text("plan.txt") == "get stone\n"
    same = one(store, "<|WRITE|>plan.txt|get stone")
    assert same.redundant and not same.changed
    fresh = one(store, "<|WRITE|>plan.txt|craft table")
    assert not fresh.redundant and fresh.changed


def test_upsert_one_line_per_key_moves_to_end(store: MemoryStore) -> None:
    store.init_file("map.txt", "", FilePolicy(mode="keyed"))
    assert "added key" in one(store, "<|UPSERT|>map.txt|3,4|water").text
    one(store, "<|UPSERT|>map.txt|5,6|tree")
    updated = one(store, "<|UPSERT|>map.txt|3,4|dry ground")
    assert updated.changed and "updated key" in updated.text
    assert store.read_text("map.txt") == "5,6: tree\n3,4: dry ground\n"
    same = one(store, "<|UPSERT|>map.txt|3,4|dry ground")
    assert same.ok and same.redundant and not same.changed


def test_upsert_key_with_colon_is_refused(store: MemoryStore) -> None:
    store.init_file("map.txt", "", FilePolicy(mode="keyed"))
    result = store.execute(Op(OpName.UPSERT, "map.txt", ("a: b", "x")))
    assert not result.ok and "':'" in result.text
    assert store.read_text("map.txt") == ""


def test_upsert_in_free_file_replaces_its_key_line(store: MemoryStore) -> None:
    store.init_file("notes.txt", "header line\nhp: 5\n")
    one(store, "<|UPSERT|>notes.txt|hp|7")
    assert store.read_text("notes.txt") == "header line\nhp: 7\n"


@pytest.mark.parametrize(
    ("policy", "refused", "hint"),
    [
        (FilePolicy(mode="keyed"), ["<|APPEND|>f.txt|x", "<|WRITE|>f.txt|x", "<|DELETE|>f.txt"], "<|UPSERT|>f.txt|key|text"),
        (FilePolicy(mode="append_only"), ["<|WRITE|>f.txt|x", "<|UPSERT|>f.txt|k|x", "<|DELETE|>f.txt"], "<|APPEND|>f.txt|text"),
        (FilePolicy(mode="reference"), ["<|APPEND|>f.txt|x", "<|UPSERT|>f.txt|k|x", "<|DELETE|>f.txt"], "read-only"),
        (FilePolicy(mode="synced", sync_source="inventory"), ["<|WRITE|>f.txt|x", "<|DELETE|>f.txt"], "read-only"),
    ],
)
def test_policies_refuse_writes_with_guidance(store: MemoryStore, policy: FilePolicy, refused: list[str], hint: str) -> None:
    store.init_file("f.txt", "k: original\n", policy)
    for text in refused:
        result = one(store, text)
        assert not result.ok and hint in result.text and not result.changed
    assert store.read_text("f.txt") == "k: original\n"
    assert one(store, "<|READ|>f.txt").ok


def test_cap_prunes_oldest_lines_and_says_so(store: MemoryStore) -> None:
    store.init_file("log.txt", "", FilePolicy(mode="append_only", max_lines=5, prune_to=2))
    results = run(store, "\n".join(f"<|APPEND|>log.txt|line {i}" for i in range(6)))
    assert all(r.ok for r in results)
    assert "pruned the 4 oldest lines" in results[-1].text
    assert store.read_text("log.txt") == "line 4\nline 5\n"


def test_keyed_cap_drops_least_recently_updated_keys(store: MemoryStore) -> None:
    store.init_file("map.txt", "", FilePolicy(mode="keyed", max_lines=3, prune_to=2))
    run(store, "<|UPSERT|>map.txt|a|1\n<|UPSERT|>map.txt|b|1\n<|UPSERT|>map.txt|c|1\n<|UPSERT|>map.txt|a|2")
    result = one(store, "<|UPSERT|>map.txt|d|1")
    assert "pruned the 2 oldest" in result.text
    assert store.read_text("map.txt") == "a: 2\nd: 1\n"


def test_plan_phase_is_read_only(store: MemoryStore) -> None:
    store.init_file("notes.txt", "hello\n")
    for text in ("<|CREATE|>x.txt", "<|APPEND|>notes.txt|x", "<|WRITE|>notes.txt|x", "<|DELETE|>notes.txt"):
        result = one(store, text, phase="plan")
        assert not result.ok and "PLAN phase is read-only" in result.text
    for text in ("<|READ|>notes.txt", "<|TAIL|>notes.txt|1", "<|SEARCH|>notes.txt|h", "<|SUMMARIZE|>notes.txt"):
        assert one(store, text, phase="plan").ok
    assert one(store, "<|DONE|>", phase="plan").ok
    assert store.files() == ["notes.txt"] and store.read_text("notes.txt") == "hello\n"


def test_invalid_phase_is_a_caller_bug(store: MemoryStore) -> None:
    with pytest.raises(ValueError, match="phase"):
        store.execute(Op(OpName.DONE, None), phase="act")  # type: ignore[arg-type]


def test_delete_free_file(store: MemoryStore) -> None:
    one(store, "<|CREATE|>tmp.txt")
    assert one(store, "<|DELETE|>tmp.txt").changed
    assert store.files() == []


def test_summarize_is_deterministic_and_bounded(store: MemoryStore) -> None:
    lines = [f"{i % 4},0: {'x' * 300}" for i in range(10)]
    store.init_file("map.txt", "\n".join(lines), FilePolicy(mode="keyed", max_lines=50))
    summary = one(store, "<|SUMMARIZE|>map.txt").text
    assert summary.startswith("map.txt: 10 lines, 4 distinct, 4 keys; keyed, max 50 lines (prunes to 25)")
    assert "first 3:" in summary and "last 3:" in summary
    assert len(summary) < 1_000
    assert summary == one(store, "<|SUMMARIZE|>map.txt").text
    store.init_file("short.txt", "a\nb\n")
    assert one(store, "<|SUMMARIZE|>short.txt").text.splitlines()[1:] == ["lines:", "a", "b"]


def test_reads_are_truncated_with_a_note(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m", MemoryLimits(max_read_chars=100))
    store.init_file("log.txt", "\n".join(f"entry number {i:03d}" for i in range(50)))
    read = one(store, "<|READ|>log.txt").text
    assert read.splitlines()[1] == "entry number 000"
    assert "…(truncated, 45 more lines; use TAIL or SEARCH)" in read
    tail = one(store, "<|TAIL|>log.txt|50").text
    assert tail.splitlines()[-1] == "entry number 049"
    assert "…(truncated, 45 earlier lines; use SEARCH)" in tail
    store.init_file("wide.txt", "y" * 500)
    assert one(store, "<|READ|>wide.txt").text.endswith("…")


def test_text_limits_and_control_characters(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m", MemoryLimits(max_op_chars=20))
    store.init_file("n.txt", "")
    assert not store.execute(Op(OpName.APPEND, "n.txt", ("x" * 21,))).ok
    for bad in ("a\x00b", "a\rb", "a\nb", "a\u2028b", "a\x1bb"):
        result = store.execute(Op(OpName.APPEND, "n.txt", (bad,)))
        assert not result.ok and "control character" in result.text
    assert store.execute(Op(OpName.APPEND, "n.txt", ("tab\tok é",))).ok
    assert store.read_text("n.txt") == "tab\tok é\n"
    with pytest.raises(MemoryStoreError, match="control character"):
        store.init_file("bad.txt", "a\x00b")


def test_index_and_files(store: MemoryStore) -> None:
    assert store.index() == "(no memory files)"
    store.init_file("b.txt", "1\n2\n")
    store.init_file("a.txt", "")
    assert store.files() == ["a.txt", "b.txt"]
    assert store.index() == "a.txt (0 lines)\nb.txt (2 lines)"


def test_init_file_overwrites_and_checks_cap(store: MemoryStore) -> None:
    store.init_file("rules.txt", "old")
    store.init_file("rules.txt", "new\nrules", FilePolicy(mode="reference"))
    assert store.read_text("rules.txt") == "new\nrules\n"
    assert not one(store, "<|APPEND|>rules.txt|x").ok
    with pytest.raises(MemoryStoreError, match="max_lines"):
        store.init_file("log.txt", "a\nb\nc", FilePolicy(max_lines=2))


def test_sync_rewrites_synced_files_only(store: MemoryStore) -> None:
    store.init_file("status.txt", "", FilePolicy(mode="synced", sync_source="status"))
    assert store.sync("status.txt", "x=1 y=2\nhealth: 9").changed
    assert not store.sync("status.txt", "x=1 y=2\nhealth: 9\n").changed
    assert store.read_text("status.txt") == "x=1 y=2\nhealth: 9\n"
    store.init_file("notes.txt", "")
    with pytest.raises(MemoryStoreError, match="not a synced file"):
        store.sync("notes.txt", "x")


def test_end_to_end_turn(store: MemoryStore) -> None:
    store.init_file("map.txt", "", FilePolicy(mode="keyed", max_lines=100))
    reply = (
        "The tree is at 3,4 so I record it.\n<|UPSERT|>map.txt|3,4|tree\n"
        "<|CREATE|>todo.txt\n<|APPEND|>todo.txt|collect wood\n<|DONE|>"
    )
    texts = [r.text for r in run(store, reply)]
    assert texts[-1] == "memory phase done"
    plan = parse_ops("<|SEARCH|>map.txt|tree\n<|ACTION|>move_right<|END|>")
    assert plan.action == "move_right"
    (found,) = [store.execute(op, "plan") for op in plan.ops]
    assert "3,4: tree" in found.text


# ----- journal --------------------------------------------------------------------------


def test_journal_records_every_call_in_memory_and_jsonl(store: MemoryStore) -> None:
    store.init_file("status.txt", "", FilePolicy(mode="synced", sync_source="vitals"))
    store.sync("status.txt", "health: 9")
    run(store, "<|CREATE|>n.txt\n<|APPEND|>n.txt|a\n<|APPEND|>n.txt|a\n<|SEARCH|>n.txt|zz")
    one(store, "<|WRITE|>n.txt|b", phase="plan")
    with pytest.raises(MemoryStoreError):
        store.sync("n.txt", "x")
    entries = store.journal.to_dicts()
    assert [e["op"] for e in entries] == [
        "init_file status.txt",
        "sync status.txt",
        "<|CREATE|>n.txt",
        "<|APPEND|>n.txt|a",
        "<|APPEND|>n.txt|a",
        "<|SEARCH|>n.txt|zz",
        "<|WRITE|>n.txt|b",
        "sync n.txt",
    ]
    assert [e["seq"] for e in entries] == list(range(8))
    assert [e["phase"] for e in entries] == ["harness"] * 2 + ["log"] * 4 + ["plan", "harness"]
    assert [e["redundant"] for e in entries][3:5] == [False, True]
    assert entries[5]["empty"] and entries[5]["ok"]
    assert not entries[6]["ok"] and not entries[7]["ok"]
    assert entries[4]["lines_after"] == 2 and entries[1]["lines_after"] == 1
    assert store.journal.path is not None
    on_disk = [json.loads(line) for line in store.journal.path.read_text().splitlines()]
    assert on_disk == entries


def test_journal_truncates_long_results(tmp_path: Path) -> None:
    journal = Journal(max_result_chars=10)
    entry = journal.record("log", "<|READ|>a", OpResult(True, "x" * 25), 3)
    assert entry.result == "x" * 10 + "…(15 more chars)"
    assert journal.path is None and journal.entries == [entry]


def test_journal_inside_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="inside the memory root"):
        MemoryStore(tmp_path / "m", journal=Journal(tmp_path / "m" / "journal.jsonl"))


# ----- one rule for file names, on the parser's path and on direct calls -------------------------


def test_spaces_around_a_name_name_the_same_file_on_both_paths(tmp_path: Path) -> None:
    parsed_store, direct_store = (MemoryStore(tmp_path / side) for side in ("parsed", "direct"))
    for s in (parsed_store, direct_store):
        s.init_file("map.txt", "0,0: tree")
    assert one(parsed_store, "<|DELETE|>map.txt ").ok
    assert direct_store.execute(Op(OpName.DELETE, "map.txt ")).ok
    assert parsed_store.files() == direct_store.files() == []


def test_a_name_broken_by_a_newline_is_refused_on_both_paths(store: MemoryStore) -> None:
    parsed = parse_ops("<|CREATE|>file\n.txt")
    assert parsed.ops == [] and "a newline inside the file name" in parsed.errors[0]
    result = store.execute(Op(OpName.CREATE, "file\n.txt"))
    assert not result.ok and "control characters" in result.text
    assert store.files() == []
    # Prose on the next line is not a broken name.
    assert [op.file for op in parse_ops("<|READ|>map.txt\nThen I go west.").ops] == ["map.txt"]


@pytest.mark.parametrize("name", ["MAP.TXT", "Map.txt", "STRATEGY.TXT"])
def test_a_name_differing_from_a_file_only_by_case_is_refused_with_why(store: MemoryStore, name: str) -> None:
    store.init_file("map.txt", "0,0: tree")
    store.init_file("strategy.txt", "be careful", FilePolicy(mode="reference"))
    for op in (Op(OpName.CREATE, name), Op(OpName.READ, name), Op(OpName.WRITE, name, ("overwritten",))):
        for result in (store.execute(op), *(store.execute(p) for p in parse_ops(format_op(op)).ops)):
            assert not result.ok and "only by case" in result.text and "case-insensitive filesystem" in result.text
    assert store.files() == ["map.txt", "strategy.txt"] and store.read_text("strategy.txt") == "be careful\n"


@pytest.mark.parametrize(("name", "why"), [
    ("map.txt.", "ends with '.', which Windows drops"),
    ("CON", "device name Windows reserves"),
    ("nul", "device name Windows reserves"),
    ("com1.txt", "device name Windows reserves"),
])
def test_trailing_dots_and_reserved_device_names_are_refused_with_why(store: MemoryStore, name: str, why: str) -> None:
    for result in (store.execute(Op(OpName.CREATE, name)), one_or_error(store, f"<|CREATE|>{name}")):
        assert not result.ok and why in result.text
    with pytest.raises(MemoryStoreError, match=why):
        store.init_file(name, "x")
    assert store.files() == []


def one_or_error(store: MemoryStore, text: str) -> OpResult:
    """The parsed op's result, or the parser's refusal as a failed result."""
    parsed = parse_ops(text)
    return store.execute(parsed.ops[0]) if parsed.ops else OpResult(False, parsed.errors[0])


def test_the_harness_reads_follow_every_write_and_a_file_linked_in_from_outside(store, tmp_path):
    """The index, file list and reads are kept between operations (``memory.kept_reads``): a write
    of the store and an entry added from outside must both show at once."""
    store.init_file("notes.txt", "a\n")
    assert store.index() == "notes.txt (1 lines)" and store.read_text("notes.txt") == "a\n"
    assert store.execute(Op(OpName.APPEND, "notes.txt", ("b",))).ok
    assert store.index() == "notes.txt (2 lines)" and store.read_text("notes.txt") == "a\nb\n"
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    (store.root / "link.txt").symlink_to(outside)
    assert store.files() == ["notes.txt"]
    (store.root / "notes.txt").unlink()
    assert store.files() == [] and store.index() == "(no memory files)"
