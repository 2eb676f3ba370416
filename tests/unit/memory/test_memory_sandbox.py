"""The memory store must never read or write outside its episode directory.

Hostile file names, links and special files planted inside the root, and oversized input
are run through both the agent's path (``parse_ops`` + ``execute``) and the harness calls;
every one must be refused with a result (or ``MemoryStoreError`` for harness calls), and a
snapshot of everything around the root (siblings, parent, the working directory, a few
well-known system files) must be identical afterwards.

Write operations only ever aim at paths inside the test's tmp arena (absolute names are
built from it at run time); real system paths such as /etc/passwd get read-only operations
only. The suite may run as root, and a sandbox regression must fail these tests, not
destroy the machine's files.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from automem_dagster.memory import (
    READ_ONLY_OPS,
    Journal,
    MemoryStore,
    MemoryStoreError,
    Op,
    OpName,
    format_op,
    name_problem,
    parse_ops,
)

SECRET = "TOP-SECRET-TOKEN"

# {outside} and {base} are replaced by the arena's absolute paths at run time.
HOSTILE_NAMES = [
    "../x",
    "{outside}/secret.txt",
    "{base}/episodes/ep-1/notes.txt",
    "{outside}/made-by-create.txt",
    "a/b",
    "a\\b",
    "..",
    ".",
    "",
    ".hidden",
    "x\x00y",
    "notes.txt\x00.png",
    "x\ny",
    "é.txt",
    "ｘ.txt",
    "a\u202eb.txt",
    "n" * 200,
    "n" * 65,
    "%2e%2e",
    "C:\\x",
    "..\\x",
    "notes.txt/",
    "../ep-1/notes.txt",
    "../../outside/secret.txt",
    "notes.txt.",
    "CON",
    "nul.txt",
    "file\n.txt",
]

# Real system paths: refused by name, and only ever probed with read-only operations.
SYSTEM_NAMES = ["/etc/passwd", "/etc/hostname", "/proc/self/environ", "~/.bashrc"]

# Entries planted inside the root that look like memory files but lead elsewhere.
PLANTED = ["link.txt", "linkdir", "dangling.txt", "hard.txt", "pipe.txt", "a"]


@dataclass
class Arena:
    """An episode root with hostile entries planted in it, next to files it must not touch."""

    base: Path
    root: Path
    outside: Path
    store: MemoryStore


@pytest.fixture
def arena(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Arena:
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "hard.txt").write_text(SECRET + " hard\n")
    (outside / "sub" / "nested.txt").write_text("nested\n")
    sibling = tmp_path / "episodes" / "ep-1"
    sibling.mkdir(parents=True)
    (sibling / "notes.txt").write_text("another episode\n")
    root = tmp_path / "episodes" / "ep-0"
    root.mkdir()
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    (root / "dangling.txt").symlink_to(outside / "new.txt")
    os.link(outside / "hard.txt", root / "hard.txt")
    os.mkfifo(root / "pipe.txt")
    (root / "a").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    store = MemoryStore(root, journal=Journal(tmp_path / "logs" / "journal.jsonl"))
    return Arena(tmp_path, root, outside, store)


def file_ops(name: str) -> list[Op]:
    """One operation of every kind that takes a file, aimed at ``name``."""
    return [
        Op(OpName.CREATE, name),
        Op(OpName.READ, name),
        Op(OpName.TAIL, name, ("5",)),
        Op(OpName.SEARCH, name, ("secret",)),
        Op(OpName.COUNT, name, ("secret",)),
        Op(OpName.APPEND, name, ("pwned",)),
        Op(OpName.WRITE, name, ("pwned",)),
        Op(OpName.UPSERT, name, ("k", "pwned")),
        Op(OpName.DELETE, name),
        Op(OpName.SUMMARIZE, name),
    ]


def read_ops(name: str) -> list[Op]:
    return [op for op in file_ops(name) if op.name in READ_ONLY_OPS]


def in_arena(name: str, arena: Arena) -> str:
    return name.replace("{outside}", str(arena.outside)).replace("{base}", str(arena.base))


def refused_everywhere(store: MemoryStore, name: str, ops: list[Op]) -> None:
    """Every operation in ``ops`` and every harness call on ``name`` is refused without raising."""
    for phase in ("log", "plan"):
        for op in ops:
            result = store.execute(op, phase)
            assert not result.ok, (name, op, result)
            assert not result.changed and SECRET not in result.text
    harness = [lambda: store.read_text(name)]
    if any(op.name not in READ_ONLY_OPS for op in ops):
        harness += [lambda: store.init_file(name, "pwned"), lambda: store.sync(name, "pwned")]
    for call in harness:
        with pytest.raises(MemoryStoreError):
            call()


def through_parser(store: MemoryStore, name: str, ops: list[Op]) -> None:
    """The agent's path: each op as model text, parsed and executed; same-name ops must fail."""
    for op in ops:
        for parsed in parse_ops(format_op(op)).ops:
            result = store.execute(parsed)
            assert SECRET not in result.text
            if parsed.file == name:
                assert not result.ok, (name, parsed, result)


def snapshot(base: Path, skip: set[Path]) -> dict[str, tuple]:
    """Path -> kind and content fingerprint for everything under ``base`` except ``skip``."""
    found: dict[str, tuple] = {str(base): ("dir", base.stat().st_mtime_ns)}
    for entry in os.scandir(base):
        path = Path(entry.path)
        if path in skip:
            continue
        info = entry.stat(follow_symlinks=False)
        if entry.is_symlink():
            found[entry.path] = ("link", os.readlink(path))
        elif entry.is_dir(follow_symlinks=False):
            found.update(snapshot(path, skip))
        elif entry.is_file(follow_symlinks=False):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[entry.path] = ("file", info.st_size, info.st_mtime_ns, info.st_nlink, digest)
        else:
            found[entry.path] = ("other", info.st_mode, info.st_mtime_ns)
    return found


def system_files() -> dict[str, tuple]:
    """Fingerprints of well-known files a path-traversal bug would hit."""
    found: dict[str, tuple] = {}
    for raw in ("/etc/passwd", "~/.bashrc", "/x", "/tmp/x"):
        path = Path(raw).expanduser()
        if path.is_file():
            info = path.stat()
            found[raw] = (info.st_size, info.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
        else:
            found[raw] = ("absent" if not os.path.lexists(path) else "other",)
    return found


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=ascii)
def test_hostile_names_are_refused(arena: Arena, name: str) -> None:
    name = in_arena(name, arena)
    refused_everywhere(arena.store, name, file_ops(name))
    through_parser(arena.store, name, file_ops(name))
    assert not (arena.outside / "made-by-create.txt").exists()


@pytest.mark.parametrize("name", SYSTEM_NAMES)
def test_system_paths_are_refused_by_name_and_never_read(arena: Arena, name: str) -> None:
    assert name_problem(name) is not None
    refused_everywhere(arena.store, name, read_ops(name))
    through_parser(arena.store, name, read_ops(name))
    assert not any("root:" in entry.result for entry in arena.store.journal.entries)


@pytest.mark.parametrize("name", PLANTED)
def test_planted_links_and_special_files_are_refused(arena: Arena, name: str) -> None:
    before = os.lstat(arena.root / name)
    refused_everywhere(arena.store, name, file_ops(name))
    after = os.lstat(arena.root / name)
    assert (before.st_ino, before.st_mode) == (after.st_ino, after.st_mode)
    assert (arena.outside / "secret.txt").read_text() == SECRET + "\n"
    assert (arena.outside / "hard.txt").read_text() == SECRET + " hard\n"
    assert not (arena.outside / "new.txt").exists()


def test_planted_entries_are_not_memory_files(arena: Arena) -> None:
    assert arena.store.files() == []
    assert arena.store.index() == "(no memory files)"


def test_refusals_tell_the_model_what_to_do(arena: Arena) -> None:
    result = arena.store.execute(parse_ops("<|APPEND|>../x|hello").ops[0])
    assert "invalid file name '../x'" in result.text and "notes.txt" in result.text
    link = arena.store.execute(Op(OpName.READ, "link.txt"))
    assert "not a plain memory file" in link.text and "use another name" in link.text


def test_oversize_append_is_refused(arena: Arena) -> None:
    store = arena.store
    store.init_file("notes.txt", "")
    result = store.execute(Op(OpName.APPEND, "notes.txt", ("x" * (store.limits.max_op_chars + 1),)))
    assert not result.ok and "1000-character limit" in result.text
    assert store.read_text("notes.txt") == ""


def test_file_cannot_grow_past_max_bytes(arena: Arena) -> None:
    store = arena.store
    store.init_file("log.txt", "")
    line = "y" * (store.limits.max_op_chars - 1)
    results = [store.execute(Op(OpName.APPEND, "log.txt", (f"{i:03d}{line[3:]}",))) for i in range(70)]
    first_refused = next(i for i, r in enumerate(results) if not r.ok)
    assert first_refused == store.limits.max_file_bytes // store.limits.max_op_chars
    assert "byte limit" in results[first_refused].text and "<|WRITE|>log.txt" in results[first_refused].text
    assert not any(r.ok for r in results[first_refused:])
    assert len(store.read_text("log.txt").encode()) <= store.limits.max_file_bytes
    assert store.read_text("log.txt").count("\n") == first_refused


def test_create_beyond_max_files_is_refused(arena: Arena) -> None:
    store = arena.store
    results = [store.execute(Op(OpName.CREATE, f"f{i}.txt")) for i in range(store.limits.max_files + 1)]
    assert all(r.ok for r in results[:-1])
    assert not results[-1].ok and "32 files" in results[-1].text
    assert len(store.files()) == store.limits.max_files
    with pytest.raises(MemoryStoreError, match="32 files"):
        store.init_file("one-more.txt", "")


def test_root_replaced_by_a_link_is_refused(arena: Arena) -> None:
    moved = arena.base / "episodes" / "ep-0-moved"
    arena.root.rename(moved)
    arena.root.symlink_to(arena.outside, target_is_directory=True)
    for op in (Op(OpName.READ, "secret.txt"), Op(OpName.APPEND, "secret.txt", ("pwned",)), Op(OpName.CREATE, "n")):
        result = arena.store.execute(op)
        assert not result.ok and SECRET not in result.text
    with pytest.raises(MemoryStoreError, match="moved or replaced"):
        arena.store.files()
    assert (arena.outside / "secret.txt").read_text() == SECRET + "\n"
    assert not (arena.outside / "n").exists()


def test_nothing_outside_the_root_changes(arena: Arena) -> None:
    """The whole battery, with a before/after snapshot of the parent, siblings and cwd."""
    skip = {arena.root, arena.base / "logs"}
    before, system_before = snapshot(arena.base, skip), system_files()
    store = arena.store
    for name in [*(in_arena(hostile, arena) for hostile in HOSTILE_NAMES), *PLANTED]:
        refused_everywhere(store, name, file_ops(name))
        through_parser(store, name, file_ops(name))
    for name in SYSTEM_NAMES:
        refused_everywhere(store, name, read_ops(name))
        through_parser(store, name, read_ops(name))
    store.init_file("notes.txt", "")
    store.execute(Op(OpName.APPEND, "notes.txt", ("x" * 1_001,)))
    for _ in range(70):
        store.execute(Op(OpName.APPEND, "notes.txt", ("z" * 999,)))
    for i in range(40):
        store.execute(Op(OpName.CREATE, f"f{i}.txt"))
    assert snapshot(arena.base, skip) == before
    assert system_files() == system_before
    assert SECRET not in (arena.base / "logs" / "journal.jsonl").read_text()
    leftovers = [entry for entry in os.listdir(arena.root) if entry.startswith(".")]
    assert leftovers == []
    assert set(PLANTED) <= set(os.listdir(arena.root))
