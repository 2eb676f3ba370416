"""BALROG's BabyAI and TextWorld as plugins: reset, step, score by BALROG's rule, replay in fresh processes."""

import pytest
from replay_fingerprint import fingerprint
from replay_runs import assert_all_agree, replay_fingerprints

BABYAI_SEEDS = (42, 7)
TEXTWORLD_SEEDS = (42,)


@pytest.mark.contract
def test_babyai_random_play_is_identical_in_fresh_processes():
    assert_all_agree([replay_fingerprints("babyai:GoToLocal", 40, BABYAI_SEEDS, PYTHONHASHSEED=str(index * 7919 + 1))
                      for index in range(2)])


@pytest.fixture(scope="module")
def textworld_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("textworld")


@pytest.mark.contract
def test_textworld_generation_and_play_are_identical_in_a_fresh_process(textworld_cache, tmp_path, monkeypatch):
    """This process and a fresh one (another string-hash seed), each with its own empty game cache,
    so each generates and compiles the seed's game itself, then plays it with seeded random actions."""
    monkeypatch.setenv("AUTOMEM_TEXTWORLD_CACHE", str(textworld_cache))
    here = {str(seed): fingerprint("textworld:coin_collector", seed, 30) for seed in TEXTWORLD_SEEDS}
    fresh = replay_fingerprints("textworld:coin_collector", 30, TEXTWORLD_SEEDS, PYTHONHASHSEED="7920",
                                AUTOMEM_TEXTWORLD_CACHE=str(tmp_path / "fresh"))
    assert list((tmp_path / "fresh" / "coin_collector").glob("seed42-*.z8"))  # it did generate its own
    assert_all_agree([here, fresh])


@pytest.mark.contract
def test_textworld_coin_collector_follows_balrogs_rules(textworld_cache):
    """The game's own walkthrough wins it: progression max(score / max score, won) is 1.0; the
    objective (which would give the route away) is not in the observation."""
    import textworld

    from automem_dagster.games.textworld_game import TextWorldGame

    with TextWorldGame("coin_collector", cache=textworld_cache) as game:
        assert game.max_steps == 80 and game.default_action == "help"
        first = game.reset(42)
        assert "-= Laundromat =-" in first.observation and "coin" not in first.observation.lower()
        assert "task for today" not in first.observation and first.progression == 0.0
        fingerprint = game.world_fingerprint()
        [compiled] = (textworld_cache / "coin_collector").glob("seed42-*.json")
        walkthrough = textworld.Game.load(str(compiled)).walkthrough  # the winning commands TextWorld recorded
        steps = [game.parse_action(command) for command in walkthrough]
        assert all(step.valid for step in steps) and steps[-1].action == "take_coin"
        for step in steps:
            result = game.step(step.action)
        assert result.done and result.progression == 1.0 and result.info["won"] and result.info["end_reason"] == "won"
        assert len(steps) == 20  # BALROG's Coin Collector: a 20-step optimal path
        game.reset(42)
        assert game.world_fingerprint() == fingerprint
        with pytest.raises(ValueError, match="unknown TextWorld action 'dance'"):
            game.step("dance")
