"""What the equal_score gate reads of a batch (``behaviour.gate_reading``, ``guard_readings``) and how it
judges it: a rate without a denominator is excluded rather than read as 0, input tokens are counted
uncached, and a saving bought by a collapse of valid actions, reads or writes is never a keep. Method
checks against cases whose right answer is known by construction, not results."""

import pytest
from builders import step, turn

from automem_dagster.metrics.behaviour import gate_reading, guard_readings
from automem_dagster.metrics.paired import GatePolicy, compare_metric, compare_paired
from automem_dagster.metrics.verdict import gate_verdict

SIX = range(6)
SCORES = {s: 0.1 * (s % 3) for s in SIX}
TOKENS = GatePolicy("equal_score", metric="input_tokens_per_step")


def op(name: str, **flags) -> dict:
    return {"op": name, "ok": True, "redundant": False, "empty": False, **flags}


def test_method_check_a_rate_without_a_denominator_is_excluded_not_a_perfect_zero():
    never_searched = [step(turns=[turn("log", ops=[op("<|APPEND|>notes|x")])]) for _ in range(3)]
    assert gate_reading(never_searched, "empty_search_rate") is None
    assert gate_reading(never_searched, "redundant_write_rate") == 0.0
    searched = [step(turns=[turn("plan", ops=[op("<|SEARCH|>notes|tree", empty=True)])]) for _ in range(2)]
    assert gate_reading(searched, "empty_search_rate") == 1.0
    # seeds 0-2 searched on both sides; on 3-5 the candidate never searched: those are left out of the test
    champion = {s: 0.5 for s in SIX}
    candidate = {s: 0.0 for s in range(3)}
    metric = compare_metric(SCORES, SCORES, candidate, champion, GatePolicy("equal_score", metric="empty_search_rate"))
    assert metric.n == 3 and metric.excluded == (3, 4, 5) and metric.candidate_mean == 0.0


def test_method_check_fewer_calls_with_the_prompt_cache_are_no_token_saving():
    # The champion makes 2 calls a step whose 1,000-token prompts are 900 cached; the candidate 1 call of
    # 1,000 tokens, none cached: 1,000 against 2,000 input tokens, but 1,000 against 200 processed anew.
    cached = [step(turns=[turn("log", input_tokens=1000, cached_tokens=900)] * 2) for _ in range(4)]
    uncached = [step(turns=[turn("log", input_tokens=1000, cached_tokens=0)]) for _ in range(4)]
    assert gate_reading(cached, "input_tokens_per_step") == 200.0
    assert gate_reading(uncached, "input_tokens_per_step") == 1000.0
    retried = [step(turns=[turn("log", input_tokens=1000, cached_tokens=900, attempts=2)])]
    assert gate_reading(retried, "input_tokens_per_step") == 1000.0  # a retry finds its own prompt cached
    metric = compare_metric(SCORES, SCORES, dict.fromkeys(SIX, 1000.0), dict.fromkeys(SIX, 200.0), TOKENS)
    decision = gate_verdict(compare_paired(SCORES, SCORES), TOKENS, metric)
    assert decision.outcome == "rolled_back" and "uncached" in decision.reason


def test_method_check_a_saving_bought_by_no_longer_writing_memory_is_rolled_back():
    writer = [step(turns=[turn("log", ops=[op("<|APPEND|>notes|x"), op("<|READ|>notes")])]) for _ in range(4)]
    silent = [step(turns=[turn("log")]) for _ in range(4)]
    assert guard_readings([writer]) == {"valid_action_rate": 1.0, "reads_per_step": 1.0, "writes_per_step": 1.0}
    assert guard_readings([silent])["writes_per_step"] == 0.0
    cheaper = {s: 1600.0 + s for s in SIX}
    guards = {name: (guard_readings([silent])[name], guard_readings([writer])[name])
              for name in ("valid_action_rate", "reads_per_step", "writes_per_step")}
    metric = compare_metric(SCORES, SCORES, cheaper, {s: 2100.0 + s for s in SIX}, TOKENS, guards=guards)
    decision = gate_verdict(compare_paired(SCORES, SCORES), TOKENS, metric)
    assert decision.outcome == "rolled_back"
    assert "collapse of reads_per_step 0 vs 1, writes_per_step 0 vs 1" in decision.reason
    kept = gate_verdict(compare_paired(SCORES, SCORES), TOKENS,
                  compare_metric(SCORES, SCORES, cheaper, {s: 2100.0 + s for s in SIX}, TOKENS,
                                 guards={"writes_per_step": (0.8, 1.0)}))
    assert kept.outcome == "kept", kept.reason              # 80 % of the champion's writes is no collapse


@pytest.mark.parametrize("metric", ["unproductive_action_rate", "redundant_write_rate", "empty_search_rate"])
def test_an_empty_episode_has_no_reading(metric):
    assert gate_reading([], metric) is None
