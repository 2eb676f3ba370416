"""A MiniHack suite pairs on (task, seed): ``minihack:<A>+<B>`` (and ``minihack:suite``, the BALROG tasks)
plays each (task, seed) as one unit (``games.minihack_suite``), never an evaluation world in training,
each episode with its own task's actions (real MiniHack episodes)."""

import pytest

from automem_dagster.games import BALROG_MINIHACK_TASKS, make_game
from automem_dagster.games.minihack_suite import suite_unit, suite_units
from automem_dagster.rollout.seeds import eval_seeds, load_seed_config, training_seeds

SUITE = "minihack:Corridor-R3+MazeWalk-9x9"


def test_a_suite_plays_every_task_on_every_evaluation_seed_and_never_an_evaluation_world_in_training():
    assert eval_seeds("minihack:suite") == suite_units(len(BALROG_MINIHACK_TASKS), [42, 43, 44, 45, 46])
    assert len(eval_seeds("minihack:suite")) == 40
    assert eval_seeds(SUITE)[:4] == [42, 142, 43, 143]          # seed-major: a prefix spreads over the tasks
    tasks = ("Corridor-R3", "MazeWalk-9x9")
    played = {suite_unit(tasks, u) for u in eval_seeds(SUITE)}
    assert played == {(t, s) for t in tasks for s in (42, 43, 44, 45, 46)}
    training = {suite_unit(tasks, u) for u in training_seeds(SUITE, 200)}
    assert not training & played and {t for t, _ in training} == set(tasks)
    assert all(s in load_seed_config().training.seeds() for _, s in training)


def test_a_suite_offers_each_episode_the_actions_of_its_own_task():
    game = make_game(SUITE, 2)
    try:
        assert len(game.actions()) > 8                          # before a reset: the suite's vocabulary
        game.reset(142)
        assert len(game.actions()) == 8 and game.default_action == "north"     # MazeWalk-9x9
        assert game.step("north").info["env_id"] == "MiniHack-MazeWalk-9x9-v0"
        game.reset(42)
        assert game.step("north").info["env_id"] == "MiniHack-Corridor-R3-v0"
    finally:
        game.close()


def test_a_suite_name_that_lists_a_task_twice_or_an_unknown_task_is_refused():
    with pytest.raises(ValueError, match="distinct tasks joined by"):
        make_game("minihack:Corridor-R3+Corridor-R3")
    with pytest.raises(ValueError, match="Nowhere-R9"):
        make_game("minihack:Corridor-R3+Nowhere-R9")
