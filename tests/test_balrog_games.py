"""BALROG's BabyAI and TextWorld as plugins: reset, step, score by BALROG's rule, replay in fresh processes."""

import pytest
from replay_fingerprint import fingerprint
from test_games import assert_all_agree, replay_fingerprints

from automem_dagster.games import make_game
from automem_dagster.games.babyai_game import BABYAI_ACTIONS

BABYAI_SEEDS = (42, 7)
TEXTWORLD_SEEDS = (42,)


def test_babyai_renders_its_view_in_words_and_takes_balrogs_actions():
    with make_game("babyai:GoToLocal") as game:
        assert game.max_steps == 64 and game.default_action == "go_forward"  # the level's own limit
        assert list(game.actions()) == list(BABYAI_ACTIONS) and game.packages[0] == "minigrid"
        first = game.reset(42)
        lines = first.observation.splitlines()
        assert lines[0] == "Mission: go to the yellow key"
        assert "a wall 4 steps forward" in lines and "a green ball 2 steps right" in lines
        assert game.parse_action("turn left").action == "turn_left"  # BALROG spells it with a space
        turned = game.step("turn_left")
        assert "a yellow key 2 steps left" in turned.observation.splitlines()
        assert (turned.reward, turned.done, turned.progression) == (0.0, False, 0.0)
        assert (first.state.level, turned.state.level) == ({"facing": 1}, {"facing": 0})  # what the stuck signal sees
        fingerprint = game.world_fingerprint()
        game.reset(42)
        assert game.world_fingerprint() == fingerprint
        game.reset(43)
        assert game.world_fingerprint() != fingerprint


def test_babyai_solving_the_mission_sets_progression_to_one():
    """minigrid's own BabyAI bot plays the level; BALROG's progression is 1.0 once a step pays a reward."""
    from minigrid.utils.baby_ai_bot import BabyAIBot

    with make_game("babyai:GoToLocal") as game:
        result = game.reset(42)
        bot, names = BabyAIBot(game._env), list(BABYAI_ACTIONS)
        while not result.done:
            result = game.step(names[int(bot.replan())])
        assert result.reward > 0 and result.progression == 1.0 and result.info["end_reason"] == "solved"
        assert result.info["step"] < game.max_steps


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

