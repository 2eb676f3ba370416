"""Batches of dense ASCII-map observations (what costs most tokens per character), for the token-count tests."""

from __future__ import annotations

from evidence_trajectories import _step, _turn, _write

MAP = "\n".join(["..T....##....~~..", "..T..@.##....~~..", ".......##..c.~~..", "TTT....##.......S"])
MESSAGES = [{"role": "system", "content": "You diagnose memory use."},
            {"role": "user", "content": f"Step 3, the map:\n{MAP}\nWhat went wrong?"}]


def map_batch(folder, steps: int = 40, maps: int = 1):
    """One finished episode whose observations are ``maps`` ASCII maps (dense text) and idle turns."""
    folder.mkdir(parents=True, exist_ok=True)
    observation = "\n".join([MAP] * maps)
    return [_write(folder, "crafter__seed7", [_step("noop", (0, 0), [_turn("plan", 10)],
                                                    observation=f"{observation}\nstep {i}") for i in range(steps)])]
