"""Pinned worlds: the world fingerprint (``Game.world_fingerprint``) of a few seeds of each game,
committed here. A crafter, minihack, nle, numba or opensimplex upgrade that changes what a seed
builds fails this test, instead of letting a new batch be paired with one played on other worlds
(a batch's identity records the fingerprints, ``rollout/identity.py``)."""

import pytest

from automem_dagster.games import make_game
from automem_dagster.rollout import identity

PINNED = {
    "crafter": {"42": "f330b21a7743e814", "43": "da266b545b21862a", "44": "1ac4efc6cae9049d"},
    "minihack:Corridor-R3": {"42": "58549b9b89b07169", "43": "1446bd2ee3e5306c", "44": "c38aa8cbbaf8cb7d"},
    "minihack:Quest-Easy": {"42": "c6a1605ab958f58a", "43": "5cb11f336afb2083"},
    "nethack": {"42": "c07193bdf045f862", "43": "bee51580ba9b9ce3", "44": "c9c6897b79738b54"},
}
"""Made with crafter 1.8.3, numpy 2.4.6, opensimplex 0.4.5.1, numba 0.68.1, minihack 1.0.2, nle 1.3.0
(``world_facts(game, seeds, 10)["worlds"]``)."""


@pytest.mark.parametrize("game", sorted(PINNED))
def test_the_worlds_of_pinned_seeds_are_unchanged(game, monkeypatch):
    monkeypatch.setattr(identity, "_WORLDS", {})       # built here, not remembered from another test's batch
    facts = identity.world_facts(game, [int(s) for s in PINNED[game]], max_steps=10)
    changed = {seed: fp for seed, fp in facts["worlds"].items() if PINNED[game][seed] != fp}
    assert not changed, (f"{game}: the worlds of seeds {sorted(changed)} changed with packages {facts['packages']}; "
                         "batches played before are on other worlds: re-evaluate champions, then update PINNED")


def test_the_fingerprint_covers_the_world_beyond_the_first_view():
    game = make_game("crafter", 10)
    try:
        game.reset(42)
        before = game.world_fingerprint()
        game._env._world._mat_map[0, 0] += 1      # a cell far outside the player's view
        assert game.world_fingerprint() != before
        game.reset(42)
        assert game.world_fingerprint() == before
    finally:
        game.close()
