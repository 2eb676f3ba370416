"""The ``rules`` meta: a deterministic diagnosis and revision that needs no model.

It is the structure loop's baseline, as the ``random`` agent is the game agent's: a meta-LLM
is worth its cost only if its revisions beat these. Selected with ``--meta rules`` or ``meta: {kind: rules}``
in an endpoints file (``llm/config.RulesMeta``: a kind of meta, not an endpoint). Every rule reads only the computed evidence
(``evidence.collect_evidence`` plus the per-operation outcomes counted here), writes a finding
that cites the evidence it rests on (episode, step and the counts), and contributes the
structural change that evidence calls for:

- a model-writable file nobody read or wrote is dropped;
- a file with redundant writes becomes keyed (one line per key, written with UPSERT);
- a prompt that grows over the episode gets a line cap with pruning on its most-written files;
- stuck stretches switch the stuck warning on, back-and-forth moves the oscillation warning;
- an operation whose every use failed (refused, or a SEARCH that found nothing) is disabled;
- memory written or read on few steps, where the routine (not the model) held LOG or the
  consultation back, makes LOG run more often or stops reusing consultations; a LOG that ran and
  wrote nothing on most steps makes a LOG turn write at least once (``meta/routine_rules.py``);
- invalid actions and malformed turns are reported; no scaffold change of the repertoire fixes them.

The diagnosis and the patch go through the same ``Finding`` model, ``apply_patch`` validation,
lineage, MLflow records and paired gate as a meta-LLM's.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from automem_dagster.llm.config import RULES
from automem_dagster.memory.ops import OpName
from automem_dagster.meta.diagnosis_record import Diagnosis, DiagnosisError, Finding
from automem_dagster.meta.evidence import collect_evidence, recorded_op, tally
from automem_dagster.meta.revise import Revision
from automem_dagster.meta.routine_rules import (
    routine_outcomes,
    rule_silent_log,
    rule_sparse_memory,
    rule_unread_consultation,
)
from automem_dagster.meta.rule_finding import RuleFinding, end_of_first
from automem_dagster.rollout.trajectory import finished_episodes, read_trajectory
from automem_dagster.scaffold.io import diff_scaffolds, revision_changes, scaffold_yaml
from automem_dagster.scaffold.model import Scaffold
from automem_dagster.scaffold.patch import PatchRejected, ScaffoldPatch, apply_patch

RULES_NOTE = ("the rules meta (deterministic, no model) made this diagnosis: each finding is a rule that fired on "
              "the evidence below and cites it")

REDUNDANT_MIN = 2
"""Redundant writes to one file before it is made keyed."""
REDUNDANT_SHARE = 0.25
"""...and their least share of that file's writes (a few repeats in many writes are noise)."""
GROWTH_SLOPE = 2.0
"""Input tokens per step added per step (mean over episodes) above which files get a line cap."""
GROWTH_RATIO = 1.5
"""...or this ratio of the last to the first steps' input tokens."""
LINE_CAP = 20
"""``max_lines`` given to a growing file; pruning keeps the newest half."""
CAPPED_FILES = 2
"""How many of the most-written files get the cap."""
STUCK_MIN = 3
"""Steps of a stuck stretch before the stuck warning is switched on (and its ``repeats``)."""
REVERSALS_MIN = 2
"""Direction reversals in a row before the oscillation warning is switched on."""
FAILING_MIN = 2
"""Uses of an operation, all failed, before it is disabled."""
_NEEDED_BY_MODE = {"keyed": OpName.UPSERT, "append_only": OpName.APPEND}
_WRITE_OPS = (OpName.APPEND, OpName.WRITE, OpName.UPSERT)


def operation_outcomes(paths: list[Path]) -> dict[str, dict[str, int]]:
    """Per operation name: its uses and how many failed (refused, or a SEARCH or COUNT that found nothing)."""
    counts: dict[str, Counter] = {}
    for path in paths:
        _, steps, _ = read_trajectory(path)
        for record in steps:
            for turn in record["turns"]:
                for op in turn["ops"]:
                    parsed = recorded_op(op["op"])
                    if parsed is None:
                        continue
                    c = counts.setdefault(parsed.name.value, Counter())
                    c["uses"] += 1
                    c["failed"] += (not op["ok"]) or bool(op["empty"])
    return {name: {"uses": c["uses"], "failed": c["failed"]} for name, c in sorted(counts.items())}


def rules_evidence(paths: list[Path], scaffold: Scaffold) -> dict:
    """The evidence the rules read, as stored in ``diagnosis.json``: ``collect_evidence``'s plus
    ``operations`` and ``routine``."""
    evidence = collect_evidence(paths, [f.name for f in scaffold.files]).as_dict()
    evidence["operations"] = operation_outcomes(paths)
    evidence["routine"] = routine_outcomes(paths)
    return evidence


def _points(evidence: dict, kind: str) -> list[dict]:
    return [p for p in evidence["failure_points"] if p["kind"] == kind]


def _first_point_on(points: list[dict], file: str) -> dict | None:
    """The first point whose operation (``|>file|...`` or ``|>file'`` in its detail) names ``file``."""
    return next((p for p in points if f"|>{file}|" in p["detail"] or f"|>{file}'" in p["detail"]), None)


def rule_dead_files(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Drop model-writable files that no step read or wrote (keeping at least one writable file)."""
    writable = scaffold.model_writable_files()
    dead = [n for n in writable if n in evidence["files"]
            and not any(evidence["files"][n][k] for k in ("reads", "writes", "refused"))]
    dead = dead[: len(writable) - 1]
    if not dead:
        return []
    episode, step = end_of_first(evidence)
    steps = sum(e["steps"] for e in evidence["episodes"])
    return [RuleFinding(
        "other", episode, step,
        f"evidence files: {', '.join(dead)} had 0 reads and 0 writes in {steps} steps of {len(evidence['episodes'])} episodes",
        "the scaffold offers files the agent never uses; each one costs prompt tokens every turn",
        f"remove_files {dead}", {"remove_files": dead})]


def rule_redundant_writes(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Make files keyed whose writes repeat lines they already hold."""
    points, out = _points(evidence, "redundant_write"), []
    for name, usage in evidence["files"].items():
        if name not in scaffold.model_writable_files() or scaffold.file(name).policy.mode == "keyed":
            continue
        if usage["redundant_writes"] < REDUNDANT_MIN or usage["redundant_writes"] < REDUNDANT_SHARE * usage["writes"]:
            continue
        cited = _first_point_on(points, name) or {"episode": end_of_first(evidence)[0], "step_start": 0}
        policy = scaffold.file(name).policy.model_dump(mode="json", exclude_none=True) | {"mode": "keyed"}
        out.append(RuleFinding(
            "redundant_write", cited["episode"], cited["step_start"],
            f"evidence files.{name}: {usage['redundant_writes']} of {usage['writes']} writes repeated a line it held; "
            f"first at {cited['episode']} step {cited['step_start']}",
            f"{name} is {scaffold.file(name).policy.mode}: a fact rewritten is appended again instead of replaced",
            f"set_policies {name}: keyed (UPSERT replaces a key's line)",
            {"set_policies": {name: policy}, "enable_operations": [OpName.UPSERT.value]}))
    return out


def rule_context_growth(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Cap the most-written files when the prompt grows over the episode."""
    episodes = evidence["episodes"]
    slopes = [e["context"]["slope"] for e in episodes]
    ratios = [e["context"]["end_tokens_per_step"] / max(e["context"]["start_tokens_per_step"], 1.0) for e in episodes]
    if not episodes or (statistics.fmean(slopes) <= GROWTH_SLOPE and statistics.fmean(ratios) < GROWTH_RATIO):
        return []
    uncapped = [n for n in scaffold.model_writable_files()
                if scaffold.file(n).policy.max_lines is None and evidence["files"].get(n, {}).get("writes", 0) > 0]
    targets = sorted(uncapped, key=lambda n: -evidence["files"][n]["writes"])[:CAPPED_FILES]
    if not targets:
        return []
    worst = max(episodes, key=lambda e: e["context"]["slope"])
    c = worst["context"]
    policies = {n: scaffold.file(n).policy.model_dump(mode="json", exclude_none=True)
                | {"max_lines": LINE_CAP, "prune_to": LINE_CAP // 2} for n in targets}
    return [RuleFinding(
        "other", worst["episode"], max(worst["steps"] - 1, 0),
        f"evidence context: input tokens/step {c['start_tokens_per_step']:.0f} -> {c['end_tokens_per_step']:.0f} "
        f"(slope {c['slope']:+.1f}/step) in {worst['episode']}; mean slope {statistics.fmean(slopes):+.1f}",
        f"{', '.join(targets)} grow without a cap, so every turn reads more",
        f"set_policies {', '.join(targets)}: max_lines {LINE_CAP}, prune to {LINE_CAP // 2}",
        {"set_policies": policies})]


def _longest(points: list[dict]) -> dict:
    return max(points, key=lambda p: p["step_end"] - p["step_start"])


def _stretch(p: dict) -> str:
    """``ep steps 3-9 (actions noop x7)``: a stretch with the actions its detail tallies."""
    actions = p["detail"].rpartition("actions ")[2] if "actions " in p["detail"] else p["detail"]
    return f"{p['episode']} steps {p['step_start']}-{p['step_end']} (actions {actions})"


def _signal_rule(evidence: dict, kind: str, span: int, on: bool, what: str, cause: str, change: str,
                 patch: dict) -> list[RuleFinding]:
    """A warning switched on by stretches of ``kind`` whose last-first step is at least ``span``, unless ``on`` already."""
    long = [p for p in _points(evidence, kind) if p["step_end"] - p["step_start"] >= span]
    if not long or on:
        return []
    p = _longest(long)
    return [RuleFinding(kind, p["episode"], p["step_start"],
                        f"evidence failure_points: {len(long)} {what}; longest {_stretch(p)}", cause, change, patch)]


def rule_stuck(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Switch the stuck warning on when the agent stood still for ``STUCK_MIN`` steps or more."""
    return _signal_rule(evidence, "stuck", STUCK_MIN - 1, scaffold.signals.stuck.enabled,
                        f"stuck stretch(es) of >={STUCK_MIN} unchanged steps",
                        "signals.stuck is off: nothing tells the agent its actions change nothing",
                        f"signals.stuck on, repeats {STUCK_MIN}",
                        {"signals": {"stuck": {"enabled": True, "repeats": STUCK_MIN}}})


def rule_oscillation(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Switch the oscillation warning on when moves reversed ``REVERSALS_MIN`` times in a row or more."""
    return _signal_rule(evidence, "oscillation", REVERSALS_MIN, scaffold.signals.oscillation.enabled,
                        "back-and-forth stretch(es)",
                        "signals.oscillation is off: nothing tells the agent it undoes its own moves",
                        "signals.oscillation on", {"signals": {"oscillation": {"enabled": True}}})


def rule_failing_operations(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Disable enabled operations whose every use failed; never READ, one a file policy needs, or the last write."""
    needed = {OpName.READ} | {_NEEDED_BY_MODE[f.policy.mode] for f in scaffold.files if f.policy.mode in _NEEDED_BY_MODE}
    outcomes = evidence.get("operations", {})
    failing = [op for op in scaffold.operations if op not in needed
               and outcomes.get(op.value, {}).get("uses", 0) >= FAILING_MIN
               and outcomes[op.value]["failed"] == outcomes[op.value]["uses"]]
    writes_left = [op for op in scaffold.operations if op in _WRITE_OPS and op not in failing]
    if not writes_left:
        failing = [op for op in failing if op not in _WRITE_OPS]
    out = []
    for op in failing:
        kinds = ("refused_op", "empty_search")
        cited = next((p for p in evidence["failure_points"] if p["kind"] in kinds and f"<|{op.value}|>" in p["detail"]),
                     {"episode": end_of_first(evidence)[0], "step_start": 0, "kind": "refused_op"})
        n = outcomes[op.value]["uses"]
        out.append(RuleFinding(
            cited["kind"], cited["episode"], cited["step_start"],
            f"evidence operations.{op.value}: all {n} uses failed (refused or found nothing); first at "
            f"{cited['episode']} step {cited['step_start']}",
            f"{op.value} is enabled but never worked here; each failed use costs a turn's operation budget",
            f"disable_operations [{op.value}]", {"disable_operations": [op.value]}))
    return out


def rule_invalid_actions(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Report invalid actions and malformed turns; no structural change of the repertoire targets them."""
    out = []
    for kind, what in (("invalid_action", "steps without a valid action"), ("malformed_turn", "malformed turns")):
        points = _points(evidence, kind)
        if points:
            p = points[0]
            out.append(RuleFinding(
                kind, p["episode"], p["step_start"],
                f"evidence failure_points: {len(points)} {what}; first {p['episode']} step {p['step_start']}: {p['detail']}",
                "the turn format or the model, not the memory structure",
                "none: no scaffold change of the rules' repertoire fixes this"))
    return out


ALL_RULES: tuple[Callable[[dict, Scaffold], list[RuleFinding]], ...] = (
    rule_dead_files, rule_redundant_writes, rule_context_growth, rule_stuck, rule_oscillation,
    rule_failing_operations, rule_sparse_memory, rule_silent_log, rule_unread_consultation, rule_invalid_actions,
)


def apply_rules(evidence: dict, scaffold: Scaffold) -> list[RuleFinding]:
    """Every rule's findings on ``evidence`` for ``scaffold``, in rule order."""
    return [finding for rule in ALL_RULES for finding in rule(evidence, scaffold)]


def merge_patch(findings: list[RuleFinding]) -> dict:
    """One patch (``ScaffoldPatch`` fields, without the rationale) from the findings' shares."""
    patch: dict = {}
    for f in findings:
        for key, value in f.patch.items():
            if isinstance(value, list):
                patch[key] = list(dict.fromkeys([*patch.get(key, []), *value]))
            else:
                merged = patch.setdefault(key, {})
                for name, inner in value.items():
                    merged[name] = merged.get(name, {}) | inner if isinstance(inner, dict) else inner
    return patch


def rationale(findings: list[RuleFinding]) -> str:
    """The patch's rationale: each change with the finding (kind, episode, step) it answers."""
    parts = [f"[{f.kind} {f.episode} step {f.step}] {f.proposed_change}" for f in findings if f.patch]
    return ("rules meta (deterministic, no model): " + "; ".join(parts))[:1_000]


def rules_diagnose(batch_dir: Path, scaffold: Scaffold, out_dir: Path) -> Diagnosis:
    """The rules' diagnosis of a finished batch, saved in ``out_dir`` like a meta-LLM's."""
    paths = finished_episodes(Path(batch_dir))
    if not paths:
        raise DiagnosisError(f"{batch_dir}: no finished trajectories to diagnose; run or resume the rollout first")
    evidence = rules_evidence(paths, scaffold)
    findings = [Finding(**f.as_finding()).model_dump() for f in apply_rules(evidence, scaffold)]
    summary = (f"{len(findings)} rule(s) fired: {tally(f['kind'] for f in findings)}" if findings
               else "no rule fired: the evidence shows no failure the rules change structure for")
    result = Diagnosis(game=scaffold.game, scaffold_version=scaffold.version, batch_dir=str(batch_dir),
                       summary=summary, findings=findings, dropped=[], evidence=evidence,
                       compression_notes=[RULES_NOTE], attempts=[])
    result.save(out_dir)
    return result


def rules_revision(parent: Scaffold, diagnosis: Diagnosis, diagnosis_dir: Path, version: int) -> Revision:
    """The patch the rules derive from ``diagnosis``'s evidence, applied to ``parent`` as ``version``.

    The evidence is read again for ``parent`` (not the findings' texts), so a diagnosis a meta-LLM
    wrote can be revised by the rules too; its evidence then lacks the per-operation counts, and
    the rule on failing operations stays silent."""
    findings = apply_rules(diagnosis.evidence, parent)
    patch_fields = merge_patch(findings)
    reason = None
    if not patch_fields:
        reason = "the rules found nothing in the evidence that a structural change answers"
    else:
        try:
            patch = ScaffoldPatch(**patch_fields, rationale=rationale(findings))
            candidate = apply_patch(parent, patch, version, description=patch.rationale)
        except (PatchRejected, ValueError) as exc:
            reason = f"the rules' patch was rejected: {exc}"
    if reason is not None:
        return Revision(parent.game, parent.version, version, str(diagnosis_dir), None, None, [],
                        f"No candidate: {reason}\n", reason, [], RULES)
    return Revision(parent.game, parent.version, version, str(diagnosis_dir), scaffold_yaml(candidate),
                    patch.model_dump(mode="json", exclude_defaults=True), revision_changes(parent, candidate),
                    diff_scaffolds(parent, candidate), None, [], RULES)
