"""Seeded random play is identical in fresh processes for Crafter, MiniHack and NetHack, and a Crafter
world is the same with compiled and pure-Python noise (``replay_runs.py``)."""

from __future__ import annotations

import pytest
from replay_runs import assert_all_agree, replay_fingerprints

REPLAY_SEEDS = (44, 1234, 7)
REPLAY_PROCESSES = 4


def fresh_process_fingerprints(game: str, steps: int, seeds: tuple[int, ...]) -> list[dict]:
    """Fingerprints from REPLAY_PROCESSES fresh interpreters, each with its own string-hash seed.

    A fresh process lays objects out at other memory addresses and hashes strings with another
    seed, so anything in a simulator that iterates a set or an id-keyed dict shows up here while
    two plays in one process agree.
    """
    return [replay_fingerprints(game, steps, seeds, PYTHONHASHSEED=str(index * 7919 + 1))
            for index in range(REPLAY_PROCESSES)]


@pytest.mark.parametrize("game", ["crafter", "minihack:Corridor-R3", "nethack"])
@pytest.mark.contract
def test_seeded_random_play_is_identical_in_fresh_processes(game):
    assert_all_agree(fresh_process_fingerprints(game, 300, REPLAY_SEEDS))


@pytest.mark.contract
def test_crafter_worlds_are_the_same_with_compiled_and_pure_python_noise():
    """numba compiles opensimplex's noise (Crafter's world generation, 1.2-1.7 s a reset in pure
    Python); a compiled world that differed would change every Crafter seed's episode."""
    from opensimplex import internals

    assert hasattr(internals._noise3, "py_func"), "opensimplex runs uncompiled: is numba installed? (setup.cfg)"
    seeds = REPLAY_SEEDS[:2]
    assert replay_fingerprints("crafter", 40, seeds) == replay_fingerprints("crafter", 40, seeds, NUMBA_DISABLE_JIT="1")
