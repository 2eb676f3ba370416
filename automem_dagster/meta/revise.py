"""Revision: the meta-LLM turns a diagnosis into a structured patch over the parent scaffold.

The reply is requested under a JSON schema built for the parent (``revision_schema``): only
operations the parent lacks can be enabled, only its files can get new policies, and each
alternative of the schema names one structural field, so a constrained endpoint cannot answer
with wording alone. The patch is then applied by ``scaffold.patch.apply_patch``, which checks
everything again (an unconstrained endpoint gets no schema). A rejected patch is answered with
its reason and asked again, at most ``MAX_ATTEMPTS`` times; every attempt is kept, and a round
whose attempts all fail records the revision as rejected with the last reason.

With the meta endpoint's ``meta_mode: tools`` the revision is asked through the same read-only
tools over the batch as the diagnosis (``tool_session.ToolSession``, its own ``meta_tool_calls``
and ``meta_token_budget``): the meta-LLM may read the steps, memory files and scaffold it needs
before it proposes. That conversation sends no schema (tool calls are not JSON patches), so the
reply is checked as an unconstrained endpoint's is, by ``parse_revision_reply`` and
``apply_patch``; the tool calls and the cost are kept in ``revision.json``.
"""

from __future__ import annotations

import copy
import json
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from automem_dagster.atomic import write_json_atomic, write_text_atomic
from automem_dagster.datafiles import parse_json_reply
from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.strict_schema import to_strict
from automem_dagster.memory.ops import OP_SYNTAX, OpName
from automem_dagster.meta.batch_tools import BatchTools
from automem_dagster.meta.replies import Attempt, ask_again
from automem_dagster.meta.tool_session import BudgetSpent, ToolSession
from automem_dagster.options import BUDGET
from automem_dagster.scaffold.io import diff_scaffolds, revision_changes, scaffold_yaml
from automem_dagster.scaffold.model import MODEL_OPS, Limits, LogTrigger, Routine, Scaffold, Signals
from automem_dagster.scaffold.patch import MAX_FILES_TOUCHED, PatchRejected, ScaffoldPatch, apply_patch, patch_json_schema

REVISION_FILE = "revision.json"
DIFF_FILE = "diff.md"
CANDIDATE_FILE = "candidate.yaml"

MAX_ATTEMPTS = BUDGET.max_attempts
STRUCTURAL_FIELDS = ("enable_operations", "add_files", "signals", "set_policies", "limits", "routine",
                     "disable_operations")
"""Patch fields that change structure; each schema alternative requires one of them."""

SYSTEM_PROMPT = f"""You are the meta-LLM of AutoMem. You revise the memory scaffold of a game agent \
after reading a diagnosis of its trajectories. Reply with one JSON patch over the current scaffold.

Building blocks you can switch on (they already exist in the harness):
- file policies: "free" (any write), "append_only" (a log: APPEND only), "keyed" (one line per key, \
written with UPSERT: maps by coordinate, inventories by item), "reference" (read-only, pre-filled), \
"synced" (rewritten from the game state every step; sync_source: position, inventory, vitals, level \
or status); "max_lines" with "prune_to" caps a file by dropping its oldest lines.
- operations: {', '.join(op.value for op in MODEL_OPS)}.
- limits: memory operations per LOG and PLAN phase, history length, text lengths.
- signals: "stuck" warns after N steps without change; "oscillation" warns on back-and-forth moves.
- routine: when memory decisions are asked for at all. "log_every": at most this many steps without \
a LOG (1: every step); "log_triggers": events of the previous step that make a LOG due at once \
(reward, inventory, level, position); "reuse_consultation": while the memory files are unchanged, \
show the last PLAN reads again instead of asking for new ones.

Rules: the patch must change structure (files, policies, operations, limits, signals or routine), not only \
wording; the model must keep at least one file it can write; touch at most {MAX_FILES_TOUCHED} files; \
the rationale cites the diagnosis findings it answers."""

TOOLS_PROMPT = """You have read-only tools over the batch the diagnosis was made from: list the episodes, \
read steps verbatim, search steps, read a memory file as it stood at a step, read the evidence and the \
scaffold. Read what you need to choose the change (the steps the findings cite, the memory files there). \
When you are done, reply with the patch as text (no tool call): {"patch": {...}}."""


@dataclass
class Revision:
    """The outcome of asking for a revision: a candidate scaffold, or the reason there is none."""

    game: str
    parent_version: int
    version: int
    diagnosis_dir: str
    candidate_yaml: str | None
    patch: dict | None
    changes: list[str]
    diff_md: str
    rejected_reason: str | None
    attempts: list[Attempt] = field(default_factory=list)
    meta: str = ""
    """Which meta made it: ``rules`` (``meta/rules_reviser.py``) or ``llm <endpoint> (<model>)``."""
    meta_mode: str = "one_call"
    tool_calls: list[dict] = field(default_factory=list)
    """``meta_mode: tools``: every tool call with its result size and the steps it showed (``tool_session``)."""
    cost: dict = field(default_factory=dict)
    """``meta_mode: tools``: requests, tokens, why tool use stopped and the steps read (``ToolSession.summary``)."""

    @property
    def accepted(self) -> bool:
        return self.candidate_yaml is not None

    def save(self, out_dir: Path) -> Path:
        """Write ``revision.json``, ``diff.md`` and, when accepted, ``candidate.yaml`` (atomically)."""
        out = Path(out_dir)
        write_json_atomic(out / REVISION_FILE, asdict(self))
        write_text_atomic(out / DIFF_FILE, self.diff_md)
        if self.candidate_yaml is not None:
            write_text_atomic(out / CANDIDATE_FILE, self.candidate_yaml)
        return out

    @classmethod
    def load(cls, out_dir: Path) -> Revision:
        """A revision ``save`` wrote (what a round's report reads back after a Dagster run made it)."""
        data = json.loads((Path(out_dir) / REVISION_FILE).read_text())
        return cls(**{**data, "attempts": [Attempt(**a) for a in data.get("attempts", [])]})


def revision_schema(parent: Scaffold) -> dict:
    """The patch schema narrowed to ``parent``, as alternatives that each require one structural field,
    under the reply's one key ``patch`` (strict mode wants an object at the root, not ``anyOf``).

    Within a field, only values that differ from the parent can be written (a new mode for a
    file, a limit other than the current one, a signal switched the other way), so the field
    that makes an alternative structural cannot restate the parent.
    """
    base = patch_json_schema()
    props = base["properties"]
    missing = [op.value for op in MODEL_OPS if op not in parent.operations]
    removable = [op.value for op in parent.operations if op is not OpName.READ]
    writable = parent.model_writable_files()
    props["enable_operations"] = _enum_list(missing)
    props["disable_operations"] = _enum_list(removable)
    props["remove_files"] = _enum_list(writable)
    props["set_policies"] = {"type": "object", "additionalProperties": False, "properties": {
        name: _new_policy(base["$defs"]["FilePolicy"], parent.file(name).policy.mode) for name in writable}}
    props["limits"] = {"type": "object", "additionalProperties": False, "properties": {
        name: _other_than(getattr(parent.limits, name), **_bounds(info)) for name, info in Limits.model_fields.items()}}
    signals = Signals.model_json_schema()
    base["$defs"].update(signals["$defs"])
    props["signals"] = {"type": "object", "additionalProperties": False, "properties": {
        name: _switched(signals["$defs"][sub["$ref"].rsplit("/", 1)[1]], getattr(parent.signals, name).enabled)
        for name, sub in signals["properties"].items()}}
    props["routine"] = _routine_changes(parent.routine)
    props["add_files"] = {"type": "array", "items": {"$ref": "#/$defs/MemoryFile"}, "maxItems": 3}
    for key in ("log_prompt", "plan_prompt"):
        props[key] = {"type": "string", "maxLength": 2_000}
    alternatives = []
    for name in STRUCTURAL_FIELDS:
        if name in ("enable_operations", "disable_operations") and not props[name]["items"]["enum"]:
            continue
        alt_props = {name: _non_empty(props[name]), "rationale": props["rationale"]}
        alt_props.update({k: v for k, v in props.items() if k not in alt_props})
        alternatives.append({"type": "object", "properties": alt_props, "required": [name, "rationale"],
                             "additionalProperties": False})
    return to_strict({"$defs": base["$defs"], "type": "object", "properties": {"patch": {"anyOf": alternatives}},
                      "required": ["patch"], "additionalProperties": False})


class RevisionReply(BaseModel):
    """The reply ``revision_schema`` asks for."""

    model_config = ConfigDict(extra="forbid")

    patch: ScaffoldPatch


def parse_revision_reply(text: str) -> tuple[ScaffoldPatch | None, str | None]:
    """The patch in a reply: ``{"patch": {...}}`` as the schema asks, or a bare patch from a
    backend that was sent no schema (``constrained: none``)."""
    reply, error = parse_json_reply(text, RevisionReply)
    if reply is not None:
        return reply.patch, None
    bare, bare_error = parse_json_reply(text, ScaffoldPatch)
    return (bare, None) if bare is not None else (None, error if '"patch"' in text else bare_error)


def revision_messages(parent: Scaffold, diagnosis_md: str, with_tools: bool = False) -> list[dict]:
    syntax = "\n".join(f"- {OP_SYNTAX[op]}" for op in parent.operations if op in OP_SYNTAX)
    user = (f"Current scaffold ({parent.game} v{parent.version}):\n```yaml\n{scaffold_yaml(parent)}```\n\n"
            f"Its operations' syntax:\n{syntax}\n\n{diagnosis_md}\n\n"
            "Propose one patch that answers the findings. Reply with the JSON patch only.")
    system = SYSTEM_PROMPT + ("\n\n" + TOOLS_PROMPT if with_tools else "")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


async def propose_revision(parent: Scaffold, diagnosis_md: str, diagnosis_dir: Path, client: LLMClient, version: int,
                           max_attempts: int = MAX_ATTEMPTS, tools: BatchTools | None = None) -> Revision:
    """Ask for a patch until one yields a valid, structurally different scaffold ``version``; with
    ``tools`` (the tool-using mode) through a tool conversation over the batch. A tool conversation
    that spends its token budget ends the revision as rejected, with that reason."""
    meta = f"llm {client.config.name} ({client.config.model})"
    messages = revision_messages(parent, diagnosis_md, tools is not None)
    request_len = len(messages)
    schema = revision_schema(parent)
    session = ToolSession(client, tools, messages, task="patch") if tools is not None else None
    attempts: list[Attempt] = []
    reason = None
    while len(attempts) < max_attempts:
        try:
            completion = await (session.ask() if session is not None else
                                client.complete(messages, json_schema=schema, schema_name="revision"))
        except BudgetSpent as exc:
            reason = str(exc)
            break
        patch, error = parse_revision_reply(completion.text)
        candidate = None
        if patch is not None:
            try:
                candidate = apply_patch(parent, patch, version, description=patch.rationale)
            except PatchRejected as exc:
                error = str(exc)
        attempts.append(Attempt.of(completion, error))
        if candidate is not None:
            return _recorded(Revision(parent.game, parent.version, version, str(diagnosis_dir), scaffold_yaml(candidate),
                                      patch.model_dump(mode="json", exclude_defaults=True),
                                      revision_changes(parent, candidate), diff_scaffolds(parent, candidate), None,
                                      attempts, meta), session)
        # A tool conversation keeps everything: the steps it read are in it, and meta_token_budget bounds it.
        ask_again(messages, len(messages) if session is not None else request_len, completion.text,
                  f"That patch was rejected: {error}. Reply with a corrected JSON patch.")
    reason = reason or f"no valid revision in {max_attempts} attempts; last rejection: {attempts[-1].error}"
    return _recorded(Revision(parent.game, parent.version, version, str(diagnosis_dir), None, None, [],
                              f"No candidate: {reason}\n", reason, attempts, meta), session)


def _recorded(revision: Revision, session: ToolSession | None) -> Revision:
    """``revision`` with the tool conversation's calls and cost, when it was asked through tools."""
    if session is not None:
        revision.meta_mode, revision.cost = "tools", session.summary()
        revision.tool_calls = [asdict(c) for c in session.calls]
    return revision


def _enum_list(values: list[str]) -> dict:
    return {"type": "array", "items": {"type": "string", "enum": values}, "uniqueItems": True, "maxItems": 3}


def _bounds(info) -> dict[str, int]:
    bounds = {}
    for meta in info.metadata:
        if hasattr(meta, "ge"):
            bounds["minimum"] = meta.ge
        if hasattr(meta, "le"):
            bounds["maximum"] = meta.le
    return bounds


def _other_than(current: int, minimum: int, maximum: int) -> dict:
    """An integer in [minimum, maximum] other than ``current``, as ranges a grammar can hold."""
    ranges = [(minimum, current - 1), (current + 1, maximum)]
    return {"anyOf": [{"type": "integer", "minimum": lo, "maximum": hi} for lo, hi in ranges if lo <= hi]}


def _routine_changes(routine: Routine) -> dict:
    """The routine's settings, each only as a value other than ``routine``'s: another ``log_every``,
    ``reuse_consultation`` switched, or another set of triggers (a list, so not every spelling of the
    same set can be excluded; ``apply_patch`` refuses one that changes nothing)."""
    triggers = list(typing.get_args(LogTrigger))
    return {"type": "object", "additionalProperties": False, "properties": {
        "log_every": _other_than(routine.log_every, **_bounds(Routine.model_fields["log_every"])),
        "log_triggers": {"type": "array", "items": {"type": "string", "enum": triggers}, "maxItems": len(triggers)},
        "reuse_consultation": {"type": "boolean", "const": not routine.reuse_consultation}}}


def _new_policy(policy: dict, mode: str) -> dict:
    out = copy.deepcopy(policy)
    out["properties"]["mode"] = {"type": "string", "enum": [m for m in policy["properties"]["mode"]["enum"] if m != mode]}
    out["required"] = ["mode"]
    return out


def _switched(signal: dict, enabled: bool) -> dict:
    out = copy.deepcopy(signal)
    out["properties"]["enabled"] = {"type": "boolean", "const": not enabled}
    out["required"] = ["enabled"]
    return out


def _non_empty(schema: dict) -> dict:
    """``schema`` for a field that must carry at least one change when it is the required one."""
    out = copy.deepcopy(schema)
    out["minItems" if out["type"] == "array" else "minProperties"] = 1
    return out
