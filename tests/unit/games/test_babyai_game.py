"""BALROG's BabyAI as a game: its view in words, BALROG's actions, progression 1.0 once solved."""

from automem_dagster.games import make_game
from automem_dagster.games.babyai_game import BABYAI_ACTIONS


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
