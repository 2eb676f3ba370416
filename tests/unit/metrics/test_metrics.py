"""Progression aggregation (BALROG) and behaviour metrics on constructed step records."""

import math

import pytest

from automem_dagster.agent.signals import count_reversals, direction_of, is_reversal, stuck_for
from automem_dagster.metrics import behaviour_metrics, overall_progression, summarize_progression


def test_progression_mean_and_population_stderr():
    s = summarize_progression([0.0, 1.0, 1.0, 0.0])
    assert s.mean == pytest.approx(50.0)
    assert s.stderr == pytest.approx(100 * 0.5 / math.sqrt(4))
    assert summarize_progression([2 / 22]).stderr == 0.0
    with pytest.raises(ValueError, match="no episodes"):
        summarize_progression([])
    assert overall_progression({"a": summarize_progression([0.5]), "b": summarize_progression([0.1])}) == pytest.approx(30.0)


def test_direction_helpers():
    assert direction_of("move_west") == "west" and direction_of("far northeast") == "northeast"
    assert direction_of("do") is None
    assert is_reversal("north", "south") and is_reversal("move_east", "move_west")
    assert not is_reversal("north", "east") and not is_reversal("noop", "noop")
    assert count_reversals(["north", "south", "north", "east", "west"]) == 3
    assert stuck_for([1, 2, 2, 2]) == 3 and stuck_for([]) == 0


def _turn(ops, errors=(), tin=100, tout=10, latency=0.5):
    return {"ops": ops, "errors": list(errors), "input_tokens": tin, "output_tokens": tout, "latency_s": latency}


def _op(token, ok=True, redundant=False, empty=False):
    return {"op": token, "ok": ok, "redundant": redundant, "empty": empty}


def test_behaviour_metrics_on_constructed_episode():
    steps = [
        {"state": {"position": [0, 0]}, "action": "north", "action_valid": True, "wall_s": 1.0,
         "turns": [_turn([_op("<|APPEND|>a.txt|x"), _op("<|APPEND|>a.txt|x", redundant=True)]), _turn([])]},
        {"state": {"position": [0, 1]}, "action": "south", "action_valid": True, "wall_s": 1.0,   # oscillating
         "turns": [_turn([_op("<|SEARCH|>a.txt|tree", empty=True), _op("<|COUNT|>a.txt|x")])]},
        {"state": {"position": [0, 1]}, "action": "noop", "action_valid": False, "wall_s": 2.0,   # stuck, invalid
         "turns": [_turn([_op("<|WRITE|>../x|y", ok=False)], errors=["bad"])]},
        {"state": {"position": [1, 1]}, "action": "east", "action_valid": True, "wall_s": 2.0,
         "turns": [_turn([_op("<|UPSERT|>m.txt|1,2|tree")])]},
    ]
    m = behaviour_metrics([steps])
    assert m.steps == 4
    assert m.unproductive_action_rate == pytest.approx(2 / 3)
    assert m.redundant_write_rate == pytest.approx(1 / 3)   # refused writes do not count
    assert m.empty_search_rate == pytest.approx(1 / 2)
    assert m.invalid_action_rate == pytest.approx(1 / 4)
    assert m.malformed_turn_rate == pytest.approx(1 / 5)
    assert m.model_calls_per_step == pytest.approx(5 / 4)
    assert m.input_tokens_per_step == pytest.approx(125.0)
    assert m.wall_s_per_step == pytest.approx(1.5)
