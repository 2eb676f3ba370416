"""Structured patches: how the meta-LLM proposes a scaffold revision.

The meta-LLM never rewrites a scaffold YAML; it returns a small JSON patch against the
parent (replace a prompt, add or remove files, change file policies, switch operations,
adjust limits, signals and the memory routine) with a rationale citing the diagnosis. A patch is parsed
without ever raising anything but ``PatchRejected``, and applied only if the result is
a valid scaffold that differs structurally from the parent (wording alone is not a
revision) and still leaves the memory in the model's hands (some file it can write).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from automem_dagster.datafiles import parse_json_reply
from automem_dagster.memory.ops import OpName
from automem_dagster.memory.policy import FilePolicy
from automem_dagster.scaffold.io import ScaffoldError, parse_scaffold, structural_changes
from automem_dagster.scaffold.model import Limits, MemoryFile, Routine, Scaffold, Signals

MAX_FILES_TOUCHED = 20
"""A revision touching more files than this is a rewrite, not a diagnosable change."""

# Same bounds as the scaffold's prompts, so constrained decoding cannot emit an oversized one.
_Prompt = Annotated[(str, *Scaffold.model_fields["log_prompt"].metadata)]

class PatchRejected(ValueError):
    """A patch that cannot become a scaffold version; the message says why, for the lineage record."""


class ScaffoldPatch(BaseModel):
    """A structural revision of one scaffold, as the meta-LLM proposes it.

    Every field but ``rationale`` is optional: absent means "as in the parent". ``limits``,
    ``signals`` and ``routine`` are partial updates so the meta-LLM names only what it changes.
    """

    model_config = ConfigDict(extra="forbid")

    log_prompt: _Prompt | None = Field(None, description="replacement LOG system prompt")
    plan_prompt: _Prompt | None = Field(None, description="replacement PLAN system prompt")
    add_files: list[MemoryFile] = Field(default_factory=list, description="new memory files")
    remove_files: list[str] = Field(default_factory=list, description="names of existing files to drop")
    set_policies: dict[str, FilePolicy] = Field(default_factory=dict, description="new policy per existing file")
    enable_operations: list[OpName] = Field(default_factory=list)
    disable_operations: list[OpName] = Field(default_factory=list)
    limits: dict[str, int] = Field(default_factory=dict, description="changed Limits fields only")
    signals: dict[str, dict[str, int | bool]] = Field(
        default_factory=dict, description='changed signal settings only, e.g. {"stuck": {"enabled": true}}'
    )
    routine: dict[str, int | bool | list[str]] = Field(
        default_factory=dict, description='changed routine settings only, e.g. {"log_every": 2}'
    )
    rationale: str = Field(
        min_length=20, max_length=1_000, description="why: cite the diagnosis this revision answers"
    )

    @field_validator("limits")
    @classmethod
    def _known_limits(cls, limits: dict[str, int]) -> dict[str, int]:
        unknown = sorted(limits.keys() - Limits.model_fields.keys())
        if unknown:
            raise ValueError(f"unknown limits {unknown}: use {sorted(Limits.model_fields)}")
        return limits

    @field_validator("signals")
    @classmethod
    def _known_signals(cls, signals: dict[str, dict[str, int | bool]]) -> dict[str, dict[str, int | bool]]:
        unknown = sorted(signals.keys() - Signals.model_fields.keys())
        if unknown:
            raise ValueError(f"unknown signals {unknown}: use {sorted(Signals.model_fields)}")
        return signals

    @field_validator("routine")
    @classmethod
    def _known_routine(cls, routine: dict[str, int | bool | list[str]]) -> dict[str, int | bool | list[str]]:
        unknown = sorted(routine.keys() - Routine.model_fields.keys())
        if unknown:
            raise ValueError(f"unknown routine settings {unknown}: use {sorted(Routine.model_fields)}")
        return routine


def patch_json_schema() -> dict[str, Any]:
    """The patch's JSON schema, to request structured output from the meta-LLM."""
    return ScaffoldPatch.model_json_schema()


def parse_patch(text: str) -> ScaffoldPatch:
    """The patch in a meta-LLM reply: a JSON object, bare or inside a ```json fence.

    Replies are untrusted text, so every failure becomes ``PatchRejected`` naming the problem.
    """
    patch, error = parse_json_reply(text, ScaffoldPatch)
    if error is not None:
        raise PatchRejected(f"patch rejected: {error}")
    return patch


def apply_patch(parent: Scaffold, patch: ScaffoldPatch, version: int, description: str) -> Scaffold:
    """Scaffold ``version`` made from ``parent`` by ``patch``; ``parent`` is left unchanged.

    Raises ``PatchRejected`` for a patch that refers to files the parent lacks, is too large
    to attribute to one diagnosis, yields an invalid scaffold, changes only wording, or
    leaves the model no file it can write.
    """
    _check_shape(parent, patch)
    data = parent.model_dump(mode="json")
    data.update(version=version, parent=parent.version, description=description)
    if patch.log_prompt is not None:
        data["log_prompt"] = patch.log_prompt
    if patch.plan_prompt is not None:
        data["plan_prompt"] = patch.plan_prompt
    files = [f for f in data["files"] if f["name"] not in patch.remove_files]
    for f in files:
        if f["name"] in patch.set_policies:
            f["policy"] = patch.set_policies[f["name"]].model_dump(mode="json")
    data["files"] = files + [f.model_dump(mode="json") for f in patch.add_files]
    ops = [op for op in parent.operations if op not in patch.disable_operations]
    data["operations"] = ops + [op for op in dict.fromkeys(patch.enable_operations) if op not in ops]
    data["limits"].update(patch.limits)
    for name, changes in patch.signals.items():
        data["signals"][name].update(changes)
    data["routine"].update(patch.routine)

    try:
        new = parse_scaffold(data, f"{parent.game} v{version} (patched from v{parent.version})")
    except ScaffoldError as exc:
        raise PatchRejected(str(exc)) from exc
    if not new.model_writable_files():
        raise PatchRejected(
            "memory must stay model-driven: every file would be reference or synced, so the model could write nothing"
        )
    if not structural_changes(parent, new):
        raise PatchRejected("wording only: a revision needs a structural change "
                            "(files, policies, operations, limits, signals or routine)")
    return new


def _check_shape(parent: Scaffold, patch: ScaffoldPatch) -> None:
    """Reject references to files the parent lacks, contradictions and oversized patches."""
    existing = {f.name for f in parent.files}
    unknown = sorted((set(patch.remove_files) | patch.set_policies.keys()) - existing)
    if unknown:
        raise PatchRejected(f"unknown files {unknown}: the parent has {sorted(existing)}")
    clashing = sorted({f.name for f in patch.add_files} & existing)
    if clashing:
        raise PatchRejected(f"cannot add {clashing}: already in the parent; use set_policies to change them")
    both = sorted(set(patch.remove_files) & patch.set_policies.keys())
    if both:
        raise PatchRejected(f"files {both} are both removed and given a new policy")
    if existing <= set(patch.remove_files):
        raise PatchRejected("the patch removes every file: a revision edits the memory, it does not discard it")
    contradictory = sorted(set(patch.enable_operations) & set(patch.disable_operations))
    if contradictory:
        raise PatchRejected(f"operations {contradictory} are both enabled and disabled")
    touched = len(patch.add_files) + len(set(patch.remove_files)) + len(patch.set_policies)
    if touched > MAX_FILES_TOUCHED:
        raise PatchRejected(f"oversized patch: touches {touched} files, at most {MAX_FILES_TOUCHED} per revision")
