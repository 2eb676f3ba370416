"""Diagnosis evidence and budgeted rendering on hand-written trajectories with known answers."""

import json
import re

import pytest
from evidence_trajectories import _step, _turn, _write

from automem_dagster.meta.compress import NOTE_PREFIX, estimate_tokens, render_for_diagnosis, render_step
from automem_dagster.meta.evidence import collect_evidence
from automem_dagster.rollout import read_trajectory


def _op(text, result="done", ok=True, redundant=False, empty=False):
    return {"op": text, "ok": ok, "result": result, "redundant": redundant, "empty": empty, "changed": ok and not redundant}


def _episode_a():
    """8 steps whose failures are known: oscillation 0-2, empty search 2, redundant write 3, stuck 3-4,
    invalid action and malformed turn 4, refused op 5, oscillation 5-6, redundant write 6.
    Input tokens per step are 100, 110, ..., 170."""
    plan = "the PLAN phase ended without an ACTION; the action is read from the text or defaulted"
    return [
        _step("east", (1, 0), [_turn("plan", 100, [_op("<|READ|>map.txt", "0,0: floor")])]),
        _step("west", (0, 0), [_turn("log", 60, [_op("<|UPSERT|>map.txt|0,0|floor")]), _turn("plan", 50)]),
        _step("east", (1, 0), [_turn("log", 60, [_op("<|APPEND|>notes.txt|saw tree")]),
                               _turn("plan", 60, [_op("<|SEARCH|>map.txt|tree", "no line contains 'tree'", empty=True)])]),
        _step("east", (1, 0), [_turn("log", 70, [_op("<|UPSERT|>map.txt|0,0|floor", "map.txt already has it", redundant=True)]),
                               _turn("plan", 60)]),
        _step("noop", (1, 0), [_turn("log", 70), _turn("plan", 70, errors=[plan], text="I think I go")], valid=False),
        _step("north", (1, 1), [_turn("log", 80, [_op("<|WRITE|>strategy.txt|go", "WRITE refused: reference", ok=False)]),
                                _turn("plan", 70)], progression=0.5),
        _step("south", (1, 0), [_turn("log", 80, [_op("<|APPEND|>notes.txt|saw tree", "appended", redundant=True)]),
                                _turn("plan", 80)], progression=0.5),
        _step("south", (1, -1), [_turn("log", 90), _turn("plan", 80)], progression=0.5),
    ]


def _episode_b():
    """3 steps, 500 input tokens each, one good read and one read of a file that does not exist."""
    return [
        _step("north", (0, 1), [_turn("plan", 500, [_op("<|READ|>notes.txt", "saw tree")])]),
        _step("north", (0, 2), [_turn("plan", 500, [_op("<|READ|>ghost.txt", "ghost.txt does not exist", ok=False)])]),
        _step("east", (1, 2), [_turn("plan", 500)]),
    ]


@pytest.fixture
def batch(tmp_path):
    return [_write(tmp_path, "ep-a", _episode_a(), seed=1), _write(tmp_path, "ep-b", _episode_b(), seed=2)]


def test_failure_points_are_exact_and_stretches_merge(batch):
    evidence = collect_evidence(batch)
    found = [(p.episode, p.step_start, p.step_end, p.kind) for p in evidence.failure_points]
    assert found == [
        ("ep-a", 0, 2, "oscillation"),
        ("ep-a", 2, 2, "empty_search"),
        ("ep-a", 3, 3, "redundant_write"),
        ("ep-a", 3, 4, "stuck"),
        ("ep-a", 4, 4, "invalid_action"),
        ("ep-a", 4, 4, "malformed_turn"),
        ("ep-a", 5, 5, "refused_op"),
        ("ep-a", 5, 6, "oscillation"),
        ("ep-a", 6, 6, "redundant_write"),
        ("ep-b", 1, 1, "refused_op"),
    ]
    details = {(p.step_start, p.kind): p.detail for p in evidence.failure_points if p.episode == "ep-a"}
    assert details[(0, "oscillation")] == "2 direction reversal(s) in a row; actions east x2, west x1"
    assert details[(3, "stuck")] == "position, inventory and level unchanged for 2 step(s); actions east x1, noop x1"
    assert details[(3, "redundant_write")] == "log: '<|UPSERT|>map.txt|0,0|floor' -> 'map.txt already has it'"
    assert details[(4, "invalid_action")] == "no valid action in 'I think I go'; played the default 'noop'"
    assert details[(4, "malformed_turn")].startswith("plan turn: the PLAN phase ended without an ACTION")


def test_file_usage_includes_files_never_touched(batch):
    evidence = collect_evidence(batch, files=["map.txt", "notes.txt", "strategy.txt", "inventory.txt"])
    usage = {name: (u.reads, u.writes, u.redundant_writes, u.refused) for name, u in evidence.files.items()}
    assert usage == {
        "ghost.txt": (0, 0, 0, 1),
        "inventory.txt": (0, 0, 0, 0),
        "map.txt": (2, 2, 1, 0),
        "notes.txt": (1, 2, 1, 0),
        "strategy.txt": (0, 0, 0, 1),
    }
    assert evidence.never_read == ["ghost.txt", "inventory.txt", "strategy.txt"]
    assert evidence.never_written == ["ghost.txt", "inventory.txt", "strategy.txt"]


def test_context_growth_and_progression_per_episode(batch):
    a, b = collect_evidence(batch).episodes
    assert (a.episode, a.seed, a.steps, a.progression) == ("ep-a", 1, 8, 0.5)
    assert [(g.step, g.progression) for g in a.gains] == [(5, 0.5)]
    assert a.context.start_tokens_per_step == pytest.approx(120.0)   # mean of steps 0-4
    assert a.context.end_tokens_per_step == pytest.approx(150.0)     # mean of steps 3-7
    assert a.context.slope == pytest.approx(10.0)
    assert (b.steps, b.progression, b.gains, b.context.slope) == (3, 0.0, [], pytest.approx(0.0))
    assert b.context.start_tokens_per_step == b.context.end_tokens_per_step == pytest.approx(500.0)


def test_evidence_is_json_and_rejects_an_episode_passed_twice(batch):
    data = json.loads(json.dumps(collect_evidence(batch).as_dict()))
    assert data["files"]["map.txt"] == {"reads": 2, "writes": 2, "redundant_writes": 1, "refused": 0}
    assert data["failure_points"][0] == {"episode": "ep-a", "step_start": 0, "step_end": 2, "kind": "oscillation",
                                         "detail": "2 direction reversal(s) in a row; actions east x2, west x1"}
    with pytest.raises(ValueError, match="both hold episode ep-a"):
        collect_evidence([batch[0], batch[0]])


def _blocks(paths, evidence, steps_of=lambda p: {p.step_start}):
    """The verbatim text of every step a failure point names, keyed by (episode, step)."""
    blocks = {}
    for path in paths:
        header, steps, _ = read_trajectory(path)
        points = [p for p in evidence.failure_points if p.episode == header["episode"]]
        for point in points:
            for step in steps_of(point):
                starting = [p for p in points if p.step_start == step]
                blocks[header["episode"], step] = render_step(steps[step], starting)
    return blocks


def test_small_batch_is_rendered_in_full(batch):
    evidence = collect_evidence(batch)
    rendered = render_for_diagnosis(batch, evidence, budget_tokens=100_000)
    assert (rendered.compressed, rendered.omitted_steps, rendered.notes) == (False, 0, [])
    assert NOTE_PREFIX not in rendered.text and rendered.text.count("--- step ") == 11
    for block in _blocks(batch, evidence).values():
        assert block in rendered.text
    assert "<|SEARCH|>map.txt|tree -> [empty] no line contains 'tree'" in rendered.text
    assert "!! stuck steps 3-4: position, inventory and level unchanged for 2 step(s)" in rendered.text


@pytest.fixture
def large_batch(tmp_path):
    """4 episodes of 60 steps walking north; each has a redundant write at step 20, episode 0 is
    also stuck at steps 40-45. About 36,500 tokens in full."""
    paths = []
    for e in range(4):
        steps = []
        for i in range(60):
            y = 39 if e == 0 and 40 <= i <= 45 else i
            ops = [_op("<|APPEND|>log.txt|north", "appended", redundant=i == 20)]
            steps.append(_step("north", (0, y), [_turn("log", 100 + i, ops), _turn("plan", 100)],
                               observation=f"episode {e} step {i} " + "." * 400))
        paths.append(_write(tmp_path, f"ep{e}", steps, seed=e))
    return paths


def _notes_in_text(rendered):
    return all(NOTE_PREFIX + note in rendered.text for note in rendered.notes)


def test_large_batch_is_compressed_with_failure_steps_verbatim(large_batch):
    evidence = collect_evidence(large_batch)
    assert len(evidence.failure_points) == 5
    span = "~~ steps 0-{0} summarised: actions north x{1}; progression 0->0; reward 0; memory ops APPEND x{1}\n"
    for budget, window_note, first_span in [
        (8000, "3 step(s) either side", span.format(16, 17)),   # steps 17-23 around step 20 verbatim
        (3000, "shrunk from 3 to fit", span.format(19, 20)),    # window 0: only step 20
    ]:
        rendered = render_for_diagnosis(large_batch, evidence, budget_tokens=budget)
        assert rendered.compressed and estimate_tokens(rendered.text) <= budget
        assert _notes_in_text(rendered) and rendered.notes[0].startswith("the full step-by-step text needs ~")
        assert any(window_note in note for note in rendered.notes)
        assert rendered.text.count("--- step ") == 240 - rendered.omitted_steps > 0
        assert all(f"## episode ep{e}:" in rendered.text for e in range(4))
        ends = _blocks(large_batch, evidence, steps_of=lambda p: {p.step_start, p.step_end})
        assert len(ends) == 6 and all(block in rendered.text for block in ends.values())
        assert first_span in rendered.text


def test_tight_budget_drops_excerpts_then_episodes_and_says_so(large_batch):
    evidence = collect_evidence(large_batch)
    rendered = render_for_diagnosis(large_batch, evidence, budget_tokens=1200)
    assert rendered.compressed and estimate_tokens(rendered.text) <= 1200 and _notes_in_text(rendered)
    kept = int(re.search(r"excerpts for (\d) of 5 failure points", rendered.text).group(1))
    # Kinds take turns: ep0's redundant write, then ep0's stuck stretch (both ends, window 0), then the others.
    assert 2 <= kept < 5 and rendered.text.count("--- step ") == kept + 1
    assert "!! stuck steps 40-45:" in rendered.text and "--- step 45\n" in rendered.text
    assert "~~ steps 0-59 summarised: actions north x60; progression 0->0; reward 0; memory ops APPEND x60; " \
           "failure points redundant_write x1" in rendered.text   # a dropped excerpt is still counted

    summaries = render_for_diagnosis(large_batch, evidence, budget_tokens=300)
    assert estimate_tokens(summaries.text) <= 300 and summaries.omitted_steps == 240 and "--- step " not in summaries.text
    assert "no verbatim excerpts fit: all 5 failure points are only counted in the span summaries" in summaries.notes
    fewer = render_for_diagnosis(large_batch, evidence, budget_tokens=200)
    assert estimate_tokens(fewer.text) <= 200 and _notes_in_text(fewer)
    assert any(re.fullmatch(r"only the first \d of 4 episodes are summarised; the other \d are omitted", n) for n in fewer.notes)
    with pytest.raises(ValueError, match="too small even to say what was compressed"):
        render_for_diagnosis(large_batch, evidence, budget_tokens=20)
