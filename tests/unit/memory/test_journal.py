"""What a killed process cut short of a trajectory and its memory journal is dropped, and other damage
named."""

import json

import pytest


def test_what_a_killed_process_cut_short_is_dropped_and_other_damage_named(tmp_path):
    from automem_dagster.memory import Journal, OpResult
    from automem_dagster.memory.journal import read_journal
    from automem_dagster.rollout.trajectory import TrajectoryError, read_partial

    journal = Journal(tmp_path / "journal.jsonl")
    journal.record("harness", "init_file a", OpResult(True, "ok"), 0)
    journal.step = 3
    journal.record("log", "<|APPEND|>a|x", OpResult(True, "appended"), 1)
    path = journal.path
    path.write_text(path.read_text() + '{"seq": 2, "pha')                 # killed mid-line
    assert [(e["seq"], e["step"]) for e in read_journal(path)] == [(0, None), (1, 3)]
    path.write_text('{"seq": 0}\n[1, 2]\n{"seq": 1}\n')
    with pytest.raises(ValueError, match=r"journal .* line 2 is not an entry"):
        list(read_journal(path))

    step = {"type": "step", "observation": "o", "action": "east", "action_valid": True, "reward": 0.0,
            "progression": 0.0, "done": False, "warnings": [], "turns": [], "state": {}, "wall_s": 0.1}
    partial = tmp_path / "e.jsonl.partial"
    lines = [json.dumps({"type": "header", "episode": "e"}), json.dumps({**step, "step": 0}),
             json.dumps({**step, "step": 1})]
    partial.write_text("\n".join(lines) + "\n" + json.dumps({**step, "step": 2})[:30])
    header, steps = read_partial(partial)
    assert header["episode"] == "e" and [s["step"] for s in steps] == [0, 1]
    partial.write_text("\n".join([lines[0], lines[2], lines[1]]) + "\n")
    with pytest.raises(TrajectoryError, match=r"line 2: unexpected record 'step' \(step 1 where step 0 was due\)"):
        read_partial(partial)
