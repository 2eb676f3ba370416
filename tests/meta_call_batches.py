"""Idle Crafter batches and a diagnosis citing their steps, for the meta-LLM's diagnosis and revision calls."""

import json

from evidence_trajectories import _step, _turn, _write


def write_episode(folder, episode, steps):
    folder.mkdir(parents=True, exist_ok=True)
    return _write(folder, episode, [_step("noop", (0, 0), [_turn("plan", 10)]) for _ in range(steps)])


def _batch(tmp_path, steps):
    """A batch directory with one finished Crafter episode of ``steps`` idle steps."""
    batch = tmp_path / "batch"
    write_episode(batch / "trajectories", "crafter__seed7", steps)
    return batch


def _diagnosis(step):
    return json.dumps({"summary": "It idled for the whole episode.", "findings": [
        {"episode": "crafter__seed7", "step": step, "kind": "stuck", "what_happened": "noop", "scaffold_cause": "no warning",
         "proposed_change": "enable the stuck signal"}]})
