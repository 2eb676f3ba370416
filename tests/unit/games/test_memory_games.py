"""The built-in memory games: knobs in the name, the fact shown once, one final answer per decision."""

import pytest

from automem_dagster.games import env_ref, make_game
from automem_dagster.games.recall import parse_question
from automem_dagster.rollout.seeds import eval_seeds


def _play(game, seed, answer):
    """Walk on with ``forward``; at each question answer ``answer(observation)``; the results in order."""
    result, out = game.reset(seed), []
    while not result.done:
        asked = parse_question(result.observation)
        result = game.step(answer(result.observation) if asked else "forward")
        out.append(result)
    return out


def test_names_carry_knobs_with_defaults_filled_in():
    assert env_ref("keydoor").name == "keydoor:hall4-decoys2"
    assert env_ref("keydoor:hall8").name == "keydoor:hall8-decoys2"
    assert env_ref("courier").name == "courier:walk3-parcels3"
    assert env_ref("courier:parcels2").plugin.knobs("walk3-parcels2") == {"walk": 3, "parcels": 2}
    with pytest.raises(ValueError, match="hall must be at least 5"):
        env_ref("keydoor:hall4-decoys3")
    with pytest.raises(ValueError, match="'doors2' is no knob of keydoor"):
        env_ref("keydoor:doors2")
    assert eval_seeds("keydoor") == eval_seeds("courier:walk9") == list(range(42, 82))


@pytest.mark.parametrize("seed", [42, 43, 44, 45])
def test_keydoor_shows_the_wing_once_and_asks_once(seed):
    game = make_game("keydoor:hall6-decoys3")
    wing = game.reset(seed) and game.oracle_notes()[0].split()[-2].lower()
    right = _play(game, seed, lambda _: wing)
    shown = [r.observation for r in right]
    assert sum(f"{wing.upper()} wing" in o for o in shown) == 1 and len(shown[1:4]) == 3
    assert [r.progression for r in right][-1] == 1.0 and sum(r.reward for r in right) == 1.0
    wrong = _play(game, seed, lambda _: "east" if wing == "west" else "west")
    assert wrong[-1].progression == 0.0 and wrong[-1].observation.startswith("[lost]")
    assert len([o for o in shown if parse_question(o)]) == 1


def test_courier_needs_every_label_and_scores_the_share_delivered():
    game = make_game("courier:walk2-parcels3")
    game.reset(7)
    places = [n.split()[-1].rstrip(".").lower() for n in game.oracle_notes()]
    answers = iter(places[:2] + [next(p for p in ("mill", "farm", "dock") if p != places[2])])
    results = _play(game, 7, lambda _: next(answers))
    assert results[-1].done and results[-1].progression == pytest.approx(2 / 3)
    assert parse_question(results[-2].observation) == ("parcel 3", ["mill", "farm", "dock"])


def test_a_seed_makes_the_same_world_and_seeds_differ():
    game = make_game("keydoor")
    game.reset(42)
    first = game.world_fingerprint()
    worlds = set()
    for seed in range(42, 82):
        game.reset(seed)
        worlds.add(tuple(game.oracle_notes()))
    game.reset(42)
    assert game.world_fingerprint() == first and len(worlds) == 2
