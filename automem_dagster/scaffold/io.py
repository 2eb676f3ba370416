"""Scaffold files on disk: load with errors that name the field, save atomically, hash, diff.

Versions live at ``assets/scaffolds/<game>/v<N>.yaml``. The content hash ignores lineage
metadata (version, parent, description) so two versions with the same behaviour hash alike,
which is how the structure loop notices a revision that changed nothing.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path

import yaml

from automem_dagster.atomic import write_text_atomic
from automem_dagster.datafiles import read_yaml, validate
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.scaffold.model import Scaffold

DEFAULT_ROOT = SCAFFOLDS
_LINEAGE_FIELDS = {"version", "parent", "description"}


class ScaffoldError(ValueError):
    """A scaffold file that cannot be used; the message names the file and the field."""


def scaffold_path(game: str, version: int | str, root: Path = DEFAULT_ROOT) -> Path:
    """``version`` is an int or a string like ``"v0"`` or ``"0"``."""
    text = str(version)
    number = text[1:] if text.startswith("v") else text
    if not number.isdigit():
        raise ScaffoldError(f"scaffold version {version!r} is not a version: use v0, v1, ...")
    return Path(root) / game / f"v{int(number)}.yaml"


def stored_scaffold_path(game: str, version: int | str, root: Path = DEFAULT_ROOT) -> Path:
    """Where version ``version`` of ``game`` is read from: ``scaffold_path``, except that an installed
    plugin's v0, where ``root`` has none, is the file the plugin ships (the built-ins' v0 are in ``root``)."""
    path = scaffold_path(game, version, root)
    if path.name != "v0.yaml" or path.exists():
        return path
    from automem_dagster.games.builtin import BUILTIN  # late: the registry imports the plugins
    from automem_dagster.games.plugin import environments

    plugin = environments().get(game)
    return Path(plugin.scaffold) if plugin is not None and plugin not in BUILTIN else path


def list_versions(game: str, root: Path = DEFAULT_ROOT) -> list[int]:
    """The versions on disk; an installed plugin's v0 counts where ``root`` has none (``stored_scaffold_path``)."""
    versions = {int(p.stem[1:]) for p in (Path(root) / game).glob("v*.yaml") if p.stem[1:].isdigit()}
    return sorted(versions | ({0} if stored_scaffold_path(game, 0, root).exists() else set()))


def parse_scaffold(data: object, source: str) -> Scaffold:
    return validate(Scaffold, data, "scaffold", source, ScaffoldError)


def load_scaffold(game: str, version: int | str, root: Path = DEFAULT_ROOT) -> Scaffold:
    return load_scaffold_file(stored_scaffold_path(game, version, root))


def load_scaffold_file(path: Path) -> Scaffold:
    data = read_yaml(path, "scaffold file", ScaffoldError, "check --game and --scaffold")
    return parse_scaffold(data, str(path))


def scaffold_yaml(scaffold: Scaffold) -> str:
    data = scaffold.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def save_scaffold(scaffold: Scaffold, root: Path = DEFAULT_ROOT) -> Path:
    """Write ``<root>/<game>/v<version>.yaml`` atomically; refuses to overwrite another content."""
    path = scaffold_path(scaffold.game, scaffold.version, root)
    if path.exists() and content_hash(load_scaffold_file(path)) != content_hash(scaffold):
        raise ScaffoldError(f"{path} already holds a different scaffold: versions are immutable, use a new number")
    return write_text_atomic(path, scaffold_yaml(scaffold))


_LATER_LIMITS = ("log_min_writes", "plan_min_reads")
"""Limits added after scaffolds had been hashed: at 0 they are not part of the hash."""


def content_hash(scaffold: Scaffold) -> str:
    """A digest of everything but the lineage fields. ``limits.log_min_writes`` and ``limits.plan_min_reads`` at
    their default (0) are left out, so the scaffolds written before those settings existed keep their hashes, and
    their batches their identity."""
    data = scaffold.model_dump(mode="json", exclude=_LINEAGE_FIELDS)
    for later in _LATER_LIMITS:
        if data["limits"].get(later) == 0:
            del data["limits"][later]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def diff_scaffolds(old: Scaffold, new: Scaffold) -> str:
    """Markdown: the structural changes (or "wording only"), the rewritten wording, then the unified YAML diff."""
    lines = [f"### {old.game} v{old.version} -> v{new.version}", ""]
    lines += [f"- {c}" for c in structural_changes(old, new)] or ["- no structural change (wording only)"]
    lines += [f"- {c}" for c in wording_changes(old, new)]
    udiff = difflib.unified_diff(
        scaffold_yaml(old).splitlines(), scaffold_yaml(new).splitlines(),
        f"v{old.version}.yaml", f"v{new.version}.yaml", lineterm="",
    )
    lines += ["", "```diff", *udiff, "```"]
    return "\n".join(lines)


def structural_changes(old: Scaffold, new: Scaffold) -> list[str]:
    """Changes beyond wording: files, policies, operations, limits, signals and the routine."""
    changes: list[str] = []
    old_files = {f.name: f for f in old.files}
    new_files = {f.name: f for f in new.files}
    changes += [f"file added: {n}" for n in new_files.keys() - old_files.keys()]
    changes += [f"file removed: {n}" for n in old_files.keys() - new_files.keys()]
    for name in sorted(old_files.keys() & new_files.keys()):
        if old_files[name].policy != new_files[name].policy:
            changes.append(
                f"policy of {name}: {old_files[name].policy.model_dump(exclude_none=True)} -> "
                f"{new_files[name].policy.model_dump(exclude_none=True)}"
            )
    added = [o.value for o in new.operations if o not in old.operations]
    removed = [o.value for o in old.operations if o not in new.operations]
    if added:
        changes.append(f"operations enabled: {added}")
    if removed:
        changes.append(f"operations disabled: {removed}")
    for section in ("limits", "signals", "routine"):
        before, after = getattr(old, section).model_dump(), getattr(new, section).model_dump()
        if before != after:
            changes.append(f"{section}: {_changed_keys(before, after)}")
    return sorted(changes)


PROMPTS = ("log_prompt", "plan_prompt")
"""The two prompts a revision may rewrite beside its structural change."""


def wording_changes(old: Scaffold, new: Scaffold) -> list[str]:
    """Each prompt or file purpose rewritten, with the prompts' lengths before and after."""
    rewritten = [f"{name} rewritten ({len(getattr(old, name)):,} -> {len(getattr(new, name)):,} characters)"
                 for name in PROMPTS if getattr(old, name) != getattr(new, name)]
    purposes = {f.name: f.purpose for f in old.files}
    return rewritten + [f"purpose of {f.name} rewritten" for f in new.files
                        if f.name in purposes and purposes[f.name] != f.purpose]


def revision_changes(old: Scaffold, new: Scaffold) -> list[str]:
    """What a person reviewing a revision must see: its structural changes, then its rewritten
    wording. A patch is accepted for its structural change alone, but a rewritten prompt changes
    every turn, so a round's summary listing only the structure would hide it."""
    return structural_changes(old, new) + wording_changes(old, new)


def _changed_keys(before: dict, after: dict, prefix: str = "") -> str:
    parts = []
    for key in before:
        if isinstance(before[key], dict):
            inner = _changed_keys(before[key], after[key], f"{prefix}{key}.")
            if inner:
                parts.append(inner)
        elif before[key] != after[key]:
            parts.append(f"{prefix}{key} {before[key]} -> {after[key]}")
    return ", ".join(parts)
