"""Seed sets: the evaluation seeds are the published ones, training draws never touch them,
and a draw is the same in every process."""

import re

import pytest

from automem_dagster.rollout.seeds import (
    SeedConfigError,
    assert_disjoint,
    eval_seeds,
    load_seed_config,
    training_seeds,
)

GAMES = ("crafter", "nethack", "minihack:Corridor-R3", "minihack:Quest-Easy")


def test_eval_seeds_are_automems_fixed_sets():
    assert eval_seeds("crafter") == list(range(42, 52))
    assert eval_seeds("nethack") == list(range(42, 47))
    assert eval_seeds("minihack:Corridor-R3") == eval_seeds("MiniHack-Quest-Easy-v0") == list(range(42, 47))
    with pytest.raises(ValueError, match="unknown game 'pong'"):
        eval_seeds("pong")


@pytest.mark.parametrize("game", GAMES)
def test_no_training_seed_is_ever_an_eval_seed(game):
    training = load_seed_config().training
    every = training_seeds(game, len(training.seeds()))  # the whole stream, not a sample of it
    assert sorted(every) == list(training.seeds())
    all_eval = {s for family in ("crafter", "nethack", "minihack:X") for s in eval_seeds(family)}
    assert_disjoint(every, all_eval)
    assert not set(every) & all_eval


def test_training_draw_is_reproducible_and_continues_without_repeats():
    first = training_seeds("crafter", 10)
    assert first == training_seeds("crafter", 10)
    assert first + training_seeds("crafter", 10, offset=10) == training_seeds("crafter", 20)
    assert len(set(training_seeds("crafter", 500))) == 500
    assert training_seeds("nethack", 10) != first
    assert training_seeds("minihack:Corridor-R3", 5) == training_seeds("MiniHack-Corridor-R3-v0", 5)
    assert training_seeds("minihack:Corridor-R3", 5) != training_seeds("minihack:Quest-Easy", 5)
    with pytest.raises(ValueError, match="holds only 99000"):
        training_seeds("crafter", 2, offset=98_999)


def test_assert_disjoint_names_the_shared_seeds():
    assert_disjoint([1000, 1001], [42, 43])
    with pytest.raises(ValueError, match=r"share seeds \[42, 44\]"):
        assert_disjoint([44, 1000, 42], [42, 43, 44])


def test_a_training_range_covering_eval_seeds_is_refused(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text("eval: {crafter: [42, 43], minihack: [42], nethack: [42]}\ntraining: {first: 40, last: 99}\n")
    with pytest.raises(SeedConfigError, match=rf"{re.escape(str(path))}.*eval.crafter share seeds \[42, 43\]"):
        load_seed_config(path)
    path.write_text("eval: {crafter: [42, 42], minihack: [42], nethack: [42]}\ntraining: {first: 1000, last: 2000}\n")
    with pytest.raises(SeedConfigError, match="no seed twice"):
        eval_seeds("crafter", path)
