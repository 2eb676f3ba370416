"""The scripted stand-in's cycling replies follow the request's seed, so paired arms are paired."""

from automem_dagster.agent.sampling import request_seed
from automem_dagster.standins.scripted_rules import Rules

CYCLE = [{"match": "Phase: PLAN", "replies": ["<|ACTION|>east<|END|>", "<|ACTION|>west<|END|>", "<|ACTION|>north<|END|>"]}]


def _ask(rules: Rules, seed: int | None) -> str:
    body = {"messages": [{"role": "user", "content": "Phase: PLAN"}]}
    return rules.answer(body if seed is None else {**body, "seed": seed}).text


def test_two_interleaved_arms_with_the_same_seeds_get_the_same_replies():
    """Arm A and arm B replay one episode (same request seeds), their requests interleaved as two slots
    serve them: each step's reply is the same in both arms, and the cycle still moves on per step."""
    rules = Rules(CYCLE)
    seeds = [request_seed(42, step, "plan", 0) for step in range(4)]
    arm_a, arm_b = [], []
    for seed in seeds:
        arm_a.append(_ask(rules, seed))
        arm_b.append(_ask(rules, seed))
    assert arm_a == arm_b
    assert arm_a == ["<|ACTION|>east<|END|>", "<|ACTION|>west<|END|>", "<|ACTION|>north<|END|>", "<|ACTION|>east<|END|>"]


def test_one_arm_ahead_of_the_other_does_not_shift_its_replies():
    """The second arm played after the first (or behind it) meets the replies the first met."""
    rules = Rules(CYCLE)
    seeds = [request_seed(7, step, "plan", 0) for step in range(3)]
    first = [_ask(rules, s) for s in seeds]
    assert [_ask(rules, s) for s in seeds] == first and len(set(first)) == 3


def test_requests_without_a_seed_take_the_next_reply_each():
    rules = Rules(CYCLE)
    assert [_ask(rules, None) for _ in range(4)] == [
        "<|ACTION|>east<|END|>", "<|ACTION|>west<|END|>", "<|ACTION|>north<|END|>", "<|ACTION|>east<|END|>"]


def test_a_fault_limited_by_times_ends_even_when_retried_under_one_seed():
    """A client's retry resends the same body, seed included: ``times`` counts answers, not draws."""
    rules = Rules([{"match": "Phase: PLAN", "status": 500, "times": 2}, *CYCLE])
    seed = request_seed(42, 0, "plan", 0)
    assert [rules.answer({"messages": [{"content": "Phase: PLAN"}], "seed": seed}).status for _ in range(3)] == [500, 500, 200]
