"""The rules meta: one test per rule on constructed evidence, and the revision they make
(a whole round with the rules meta: tests/contract/test_rules_meta_round.py)."""

import builders

from automem_dagster.meta.diagnosis_record import Diagnosis, Finding
from automem_dagster.meta.evidence import ContextGrowth, EpisodeEvidence, Evidence, FailurePoint, FileUsage
from automem_dagster.meta.routine_rules import routine_outcomes
from automem_dagster.meta.rules_reviser import (
    ALL_RULES,
    GROWTH_SLOPE,
    LINE_CAP,
    apply_rules,
    rule_context_growth,
    rule_dead_files,
    rule_failing_operations,
    rule_invalid_actions,
    rule_oscillation,
    rule_redundant_writes,
    rule_silent_log,
    rule_sparse_memory,
    rule_stuck,
    rule_unread_consultation,
    rules_revision,
)
from automem_dagster.rollout.trajectory import TrajectoryWriter
from automem_dagster.scaffold import load_scaffold
from automem_dagster.scaffold.patch import ScaffoldPatch, apply_patch

V0 = load_scaffold("crafter", 0)
BUSY = FileUsage(reads=3, writes=4)


def evidence(files=None, points=(), slope=0.0, start=1000.0, end=1000.0, operations=None, routine=None) -> dict:
    """Evidence as ``diagnosis.json`` stores it: two 20-step episodes, every v0 file busy unless ``files`` says
    otherwise; ``routine``: the routine's counts (absent, as in a meta-LLM's diagnosis, unless given)."""
    usage = {f.name: BUSY for f in V0.files} | (files or {})
    episodes = [EpisodeEvidence(name, f"/{name}.jsonl", seed, 20, 0.0, [], ContextGrowth(start, end, slope))
                for name, seed in (("crafter__seed1", 1), ("crafter__seed2", 2))]
    data = Evidence(episodes, list(points), usage, [n for n, u in usage.items() if not u.reads],
                    [n for n, u in usage.items() if not u.writes]).as_dict()
    data["operations"] = operations or {}
    if routine is not None:
        data["routine"] = routine
    return data


def patch_of(findings) -> dict:
    assert len(findings) == 1
    return findings[0].patch


def assert_cites_evidence(findings, data):
    """Every finding is a valid ``Finding``, cites a step its episode has, and names the evidence field it read."""
    steps = {e["episode"]: e["steps"] for e in data["episodes"]}
    for f in findings:
        Finding(**f.as_finding())
        assert f.step < steps[f.episode] and f.what_happened.startswith("evidence ")


def test_dead_files_are_removed_but_one_writable_file_stays():
    idle = FileUsage()
    data = evidence({"strategy.txt": idle, "survival_log.txt": idle})
    findings = rule_dead_files(data, V0)
    assert patch_of(findings) == {"remove_files": ["survival_log.txt", "strategy.txt"]}
    assert "0 reads and 0 writes in 40 steps" in findings[0].what_happened
    everything_idle = evidence({f.name: idle for f in V0.files})
    assert len(patch_of(rule_dead_files(everything_idle, V0))["remove_files"]) == len(V0.files) - 1
    assert rule_dead_files(evidence(), V0) == []
    assert_cites_evidence(findings, data)


def test_redundant_writes_make_a_file_keyed_and_enable_upsert():
    point = FailurePoint("crafter__seed2", 7, 7, "redundant_write",
                         "log: '<|APPEND|>map_notes.txt|tree at 3,4' -> 'already there'")
    data = evidence({"map_notes.txt": FileUsage(reads=2, writes=6, redundant_writes=3)}, [point])
    findings = rule_redundant_writes(data, V0)
    assert patch_of(findings) == {"set_policies": {"map_notes.txt": {"mode": "keyed"}}, "enable_operations": ["UPSERT"]}
    assert (findings[0].episode, findings[0].step) == ("crafter__seed2", 7)
    assert "3 of 6 writes" in findings[0].what_happened
    # One repeat among many writes is noise, not a rewritten fact.
    assert rule_redundant_writes(evidence({"map_notes.txt": FileUsage(writes=20, redundant_writes=1)}), V0) == []
    assert_cites_evidence(findings, data)


def test_a_growing_prompt_caps_the_most_written_files():
    data = evidence({"actions_log.txt": FileUsage(writes=30), "map_notes.txt": FileUsage(writes=9)},
                    slope=GROWTH_SLOPE + 10, start=900, end=1800)
    findings = rule_context_growth(data, V0)
    policies = patch_of(findings)["set_policies"]
    assert policies == {name: {"mode": "free", "max_lines": LINE_CAP, "prune_to": LINE_CAP // 2}
                        for name in ("actions_log.txt", "map_notes.txt")}
    assert "900 -> 1800" in findings[0].what_happened
    assert rule_context_growth(evidence(slope=0.5, start=1000, end=1100), V0) == []
    assert_cites_evidence(findings, data)


def test_stuck_stretches_switch_the_stuck_warning_on():
    short = FailurePoint("crafter__seed1", 2, 3, "stuck", "unchanged for 2 step(s); actions noop x2")
    long = FailurePoint("crafter__seed2", 5, 11, "stuck", "unchanged for 7 step(s); actions noop x7")
    data = evidence(points=[short, long])
    findings = rule_stuck(data, V0)
    assert patch_of(findings) == {"signals": {"stuck": {"enabled": True, "repeats": 3}}}
    assert (findings[0].episode, findings[0].step) == ("crafter__seed2", 5)
    assert rule_stuck(evidence(points=[short]), V0) == []
    on = V0.model_copy(update={"signals": V0.signals.model_copy(update={"stuck": V0.signals.stuck.model_copy(
        update={"enabled": True})})})
    assert rule_stuck(data, on) == []
    assert_cites_evidence(findings, data)


def test_back_and_forth_switches_the_oscillation_warning_on():
    point = FailurePoint("crafter__seed1", 4, 8, "oscillation", "4 direction reversal(s) in a row; actions east x3, west x2")
    data = evidence(points=[point])
    findings = rule_oscillation(data, V0)
    assert patch_of(findings) == {"signals": {"oscillation": {"enabled": True}}}
    assert rule_oscillation(evidence(points=[FailurePoint("crafter__seed1", 4, 5, "oscillation", "1")]), V0) == []
    assert_cites_evidence(findings, data)


def test_operations_that_only_fail_are_disabled_never_read_or_a_needed_one():
    point = FailurePoint("crafter__seed1", 3, 3, "empty_search", "plan: '<|SEARCH|>map_notes.txt|iron' -> 'no line'")
    ops = {"SEARCH": {"uses": 4, "failed": 4}, "READ": {"uses": 5, "failed": 5}, "COUNT": {"uses": 3, "failed": 1},
           "DELETE": {"uses": 1, "failed": 1}}
    data = evidence(points=[point], operations=ops)
    findings = rule_failing_operations(data, V0)
    assert patch_of(findings) == {"disable_operations": ["SEARCH"]}
    assert (findings[0].kind, findings[0].step) == ("empty_search", 3)
    keyed = apply_patch(V0, ScaffoldPatch(set_policies={"map_notes.txt": {"mode": "keyed"}}, enable_operations=["UPSERT"],
                                          rationale="a keyed file for this test"), 1, "keyed")
    assert rule_failing_operations(evidence(operations={"UPSERT": {"uses": 3, "failed": 3}}), keyed) == []
    assert_cites_evidence(findings, data)


def test_memory_the_routine_held_back_revises_the_routine():
    """Two 20-step episodes with 4 reads and 6 writes in all (the issue's Crafter figure for 40 steps),
    LOG at 8 steps and 30 reused consultations: the routine, not the model, held the decisions back,
    so LOG runs twice as often and consultations are asked afresh. The same few reads and writes under
    a routine that LOGged and consulted at most steps leave it alone: then it was the model's choice."""
    sparse = {name: FileUsage() for name in (f.name for f in V0.files)}
    sparse |= {"strategy.txt": FileUsage(reads=4, writes=6)}
    held = evidence(sparse, routine={"steps": 40, "log_steps": 8, "reused_consultations": 30})
    findings = rule_sparse_memory(held, V0)
    assert patch_of(findings) == {"routine": {"log_every": 2, "reuse_consultation": False}}
    assert "4 reads in 40 steps" in findings[0].what_happened and findings[0].kind == "other"
    assert_cites_evidence(findings, held)
    revision = rules_revision(V0, _diagnosis(held), "diag", 1)
    assert revision.accepted and "routine: log_every 5 -> 2, reuse_consultation True -> False" in revision.changes
    assert rule_sparse_memory(evidence(sparse, routine={"steps": 40, "log_steps": 35, "reused_consultations": 2}),
                              V0) == []
    assert rule_sparse_memory(evidence(routine={"steps": 40, "log_steps": 8, "reused_consultations": 30}), V0) == []
    assert rule_sparse_memory(evidence(sparse), V0) == []                       # a meta-LLM's evidence: no counts
    assert rule_sparse_memory(evidence(sparse, routine={"steps": 6, "log_steps": 1, "reused_consultations": 5}),
                              V0) == []                                       # too short to judge


def test_invalid_actions_and_malformed_turns_are_reported_without_a_change():
    points = [FailurePoint("crafter__seed1", 2, 2, "invalid_action", "no valid action in 'hmm'; played 'noop'"),
              FailurePoint("crafter__seed2", 6, 6, "malformed_turn", "plan turn: no ACTION")]
    data = evidence(points=points)
    findings = rule_invalid_actions(data, V0)
    assert [(f.kind, f.patch) for f in findings] == [("invalid_action", {}), ("malformed_turn", {})]
    assert_cites_evidence(findings, data)


def test_a_log_that_never_writes_must_write_once():
    """LOG ran at 36 of 40 steps and wrote nothing (the embedded model on key and door): a LOG turn must
    make one write. A LOG that wrote at a tenth of its turns, or must write already, is left alone."""
    silent = evidence({name: FileUsage() for name in (f.name for f in V0.files)},
                      routine={"steps": 40, "log_steps": 36, "reused_consultations": 0})
    findings = rule_silent_log(silent, V0)
    assert patch_of(findings) == {"limits": {"log_min_writes": 1}} and "made 0 writes" in findings[0].what_happened
    assert_cites_evidence(findings, silent)
    revision = rules_revision(V0, _diagnosis(silent), "diag", 1)
    assert revision.accepted and any("log_min_writes" in change for change in revision.changes)
    writing = evidence({"strategy.txt": FileUsage(writes=4)}, routine={"steps": 40, "log_steps": 36,
                                                                       "reused_consultations": 0})
    assert rule_silent_log(writing, V0) == []
    forced = V0.model_copy(update={"limits": V0.limits.model_copy(update={"log_min_writes": 1})})
    assert rule_silent_log(silent, forced) == []


def test_consultations_that_mostly_end_unread_must_read_once():
    """Consultations were offered at 36 of 40 steps with notes in memory and read at 6 (the embedded model at
    key and door, made to write): a consultation must read once. Consultations that read at half of them,
    ones that must read already, a short batch or counts without the consultations are left alone."""
    unread = evidence(routine={"steps": 40, "log_steps": 36, "reused_consultations": 0,
                               "consultations_offered": 36, "consultations_read": 6})
    findings = rule_unread_consultation(unread, V0)
    assert patch_of(findings) == {"limits": {"plan_min_reads": 1}}
    assert "36 consultations offered" in findings[0].what_happened and "6 read" in findings[0].what_happened
    assert_cites_evidence(findings, unread)
    revision = rules_revision(V0, _diagnosis(unread), "diag", 1)
    assert revision.accepted and any("plan_min_reads" in change for change in revision.changes)
    half = evidence(routine={"steps": 40, "log_steps": 36, "reused_consultations": 0,
                             "consultations_offered": 36, "consultations_read": 18})
    assert rule_unread_consultation(half, V0) == []
    forced = V0.model_copy(update={"limits": V0.limits.model_copy(update={"plan_min_reads": 1})})
    assert rule_unread_consultation(unread, forced) == []
    short = evidence(routine={"steps": 6, "log_steps": 6, "reused_consultations": 0,
                              "consultations_offered": 6, "consultations_read": 0})
    assert rule_unread_consultation(short, V0) == []
    older = evidence(routine={"steps": 40, "log_steps": 36, "reused_consultations": 0})
    assert rule_unread_consultation(older, V0) == []


def test_the_routine_counts_consultations_offered_with_content_and_those_that_read(tmp_path):
    """Only a consultation on a step whose memory held a line counts as offered; it read when a plan turn
    carried out a read."""
    read = {"op": "<|READ|>notes.txt", "ok": True, "result": "key: west", "redundant": False, "empty": False,
            "changed": False}
    path = tmp_path / "episode.jsonl"
    writer = TrajectoryWriter(path, {"episode": "e", "game": "keydoor", "seed": 1, "max_steps": 3, "agent": "memory"})
    for t, (index, ops) in enumerate([("notes.txt (0 lines)", []), ("notes.txt (1 lines)", []),
                                      ("notes.txt (12 lines)", [read])]):
        writer.step({"step": t, **builders.step("forward", [builders.turn("plan", "", ops, endpoint="memory")],
                                                memory_index={"plan": index})})
    writer.finish({"steps": 3, "progression": 0.0, "total_reward": 0.0, "done": False})
    counts = routine_outcomes([path])
    assert (counts["steps"], counts["consultations_offered"], counts["consultations_read"]) == (3, 2, 1)


def test_every_rule_is_tested_here():
    tested = {name for name in globals() if name.startswith("rule_")}
    assert {rule.__name__ for rule in ALL_RULES} == tested


def _diagnosis(data) -> Diagnosis:
    findings = [f.as_finding() for f in apply_rules(data, V0)]
    return Diagnosis("crafter", 0, "batch", "rules", findings, [], data, [], [])


def test_the_rules_revision_is_validated_and_names_its_meta():
    data = evidence({"strategy.txt": FileUsage()}, [FailurePoint("crafter__seed1", 1, 9, "stuck", "unchanged")])
    revision = rules_revision(V0, _diagnosis(data), "diag", 1)
    assert revision.accepted and revision.meta == "rules" and revision.attempts == []
    assert "file removed: strategy.txt" in revision.changes and "stuck.enabled False -> True" in revision.diff_md
    assert "[stuck crafter__seed1 step 1]" in revision.patch["rationale"]
    nothing = rules_revision(V0, _diagnosis(evidence()), "diag", 1)
    assert not nothing.accepted and "found nothing" in nothing.rejected_reason
