"""Paired decision statistics: three outcomes (kept, rolled back, inconclusive) under each gate, AutoMem's
higher-mean rule read against the noise floor, BALROG's standard error, a reproducible bootstrap interval,
and refusal of comparisons that are not paired."""

import math

import numpy as np
import pytest

from automem_dagster.metrics.paired import GatePolicy, compare_paired
from automem_dagster.metrics.verdict import gate_verdict

CHAMPION = {42: 0.2, 43: 0.4, 44: 0.1, 45: 0.3, 46: 0.0}
CANDIDATE = {42: 0.3, 43: 0.4, 44: 0.3, 45: 0.3, 46: 0.1}  # differences 0.1, 0, 0.2, 0, 0.1
HIGHER = GatePolicy("higher_mean")


def test_statistics_are_paired_in_percent_with_population_stderr():
    c = compare_paired(CANDIDATE, CHAMPION)
    assert c.seeds == (42, 43, 44, 45, 46) and c.n == 5
    assert c.candidate_mean == pytest.approx(28.0) and c.champion_mean == pytest.approx(20.0)
    assert c.mean_difference == pytest.approx(8.0)
    # differences in points: 10, 0, 20, 0, 10 -> population variance 56, SE sqrt(56)/sqrt(5)
    assert c.stderr_difference == pytest.approx(math.sqrt(56) / math.sqrt(5))


def test_higher_mean_keeps_a_gain_above_the_floor_and_the_reason_quotes_the_means():
    decision = gate_verdict(compare_paired(CANDIDATE, CHAMPION), HIGHER)
    assert decision.keep and decision.outcome == "kept"
    assert "28.00%" in decision.reason and "20.00%" in decision.reason and "+8.00" in decision.reason
    assert "noise floor not measured" in decision.reason
    # The same gain inside a measured floor is not a keep: the paper's rule, read against the noise.
    inside = gate_verdict(compare_paired(CANDIDATE, CHAMPION), HIGHER, floor=9.0)
    assert inside.outcome == "inconclusive" and "noise floor 9.00 points" in inside.reason


def test_losing_candidate_rolls_back():
    decision = gate_verdict(compare_paired(CHAMPION, CANDIDATE), HIGHER)
    assert not decision.keep and decision.outcome == "rolled_back"
    assert "below" in decision.reason and "20.00%" in decision.reason and "28.00%" in decision.reason


def test_tie_is_inconclusive_even_when_float_sums_differ_by_an_ulp():
    candidate = {42: 0.1, 43: 0.2, 44: 0.3}
    champion = {42: 0.3, 43: 0.2, 44: 0.1}
    c = compare_paired(candidate, champion)
    assert c.candidate_mean != c.champion_mean  # 0.1 + 0.2 + 0.3 != 0.3 + 0.2 + 0.1 in floats
    decision = gate_verdict(c, HIGHER)
    assert decision.outcome == "inconclusive" and "inside the noise floor" in decision.reason
    assert "20.00%" in decision.reason and "the champion stays" in decision.reason
    # The same rule decides a specialist: the reason names the gate's rule, not a scaffold revision.
    assert "revision" not in decision.reason and "gate higher_mean" in decision.reason


def test_bootstrap_interval_brackets_the_difference_and_is_reproducible():
    c = compare_paired(CANDIDATE, CHAMPION)
    assert c.ci_low <= c.mean_difference <= c.ci_high
    assert 0.0 <= c.ci_low < c.ci_high <= 20.0  # bounded by the smallest and largest per-seed difference
    assert compare_paired(CANDIDATE, CHAMPION) == c
    # the interval comes from the seeded generator, not from chance: few resamples make the seed visible
    few = {s: compare_paired(CANDIDATE, CHAMPION, n_resamples=50, rng_seed=s) for s in (0, 1)}
    assert few[0] != few[1] and compare_paired(CANDIDATE, CHAMPION, n_resamples=50, rng_seed=1) == few[1]
    narrower = compare_paired(CANDIDATE, CHAMPION, confidence=0.5)
    assert c.ci_low <= narrower.ci_low <= narrower.ci_high <= c.ci_high


def test_constant_difference_has_no_spread():
    c = compare_paired({1: 0.5, 2: 0.7}, {1: 0.25, 2: 0.45}, n_resamples=100)
    assert c.stderr_difference == pytest.approx(0.0, abs=1e-12)
    assert c.ci_low == pytest.approx(25.0) and c.ci_high == pytest.approx(25.0)


def test_different_seed_sets_are_rejected_naming_the_seeds():
    candidate = {s: v for s, v in CANDIDATE.items() if s != 46} | {47: 0.1}
    with pytest.raises(ValueError, match=r"only candidate: \[47\], only champion: \[46\]"):
        compare_paired(candidate, CHAMPION)


def test_empty_side_and_percent_values_are_rejected():
    with pytest.raises(ValueError, match="no seeds for the candidate"):
        compare_paired({}, CHAMPION)
    with pytest.raises(ValueError, match=r"fractions, not percent.*\{42: 30\.0\}"):
        compare_paired({**CANDIDATE, 42: 30.0}, CHAMPION)
    with pytest.raises(ValueError, match="confidence"):
        compare_paired(CANDIDATE, CHAMPION, confidence=95)


# --- gate policies ---------------------------------------------------------------------------------


def test_permutation_p_value_is_the_exact_share_of_sign_flips():
    # Three nonzero gains and two ties: only the 4 flips that keep all three gains positive reach +8.
    assert compare_paired(CANDIDATE, CHAMPION).p_value == pytest.approx(4 / 32)
    # Five gains of one size: only the all-positive assignment, 1 of 32.
    assert compare_paired(dict.fromkeys(range(5), 0.5), dict.fromkeys(range(5), 0.2)).p_value == pytest.approx(1 / 32)
    assert compare_paired(CHAMPION, CANDIDATE).p_value == pytest.approx(1.0)


def test_the_default_gate_is_significant():
    decision = gate_verdict(compare_paired(CANDIDATE, CHAMPION))
    assert decision.policy == GatePolicy() and decision.policy.rule == "significant"
    assert "gate significant" in decision.reason


def test_significant_gate_calls_a_gain_chance_explains_inconclusive_and_says_the_seeds_needed():
    from automem_dagster.metrics.power import detectable_gain

    significant = GatePolicy("significant", level=0.05, min_seeds=5)
    detectable = detectable_gain(CANDIDATE, CHAMPION, significant)
    decision = gate_verdict(compare_paired(CANDIDATE, CHAMPION), significant, detectable=detectable)
    assert decision.outcome == "inconclusive" and not decision.keep and "p 0.125" in decision.reason
    assert f"{detectable.seeds_for['5']} paired seeds would detect a 5-point gain" in decision.reason
    assert decision.policy == significant
    # The case: one piece of wood on 2 seeds (2.27 % vs 0.00 %) was kept by the old rule only; with
    # no floor measured the seeds' spread must tell it from none now, and their interval includes 0 (issue 54).
    wood = compare_paired({1: 1 / 22, 2: 0.0}, {1: 0.0, 2: 0.0})
    assert gate_verdict(wood, HIGHER).outcome == "inconclusive"
    assert gate_verdict(wood, HIGHER, floor=2.5).outcome == "inconclusive"
    few = gate_verdict(wood, significant)
    assert few.outcome == "inconclusive" and "on 2 seeds" in few.reason and "no fewer than 5" in few.reason


def test_significant_gate_keeps_a_consistent_gain_and_never_a_loss_or_tie():
    significant = GatePolicy("significant", level=0.05, min_seeds=5)
    better = {s: 0.3 + 0.01 * s for s in range(6)}
    worse = {s: 0.1 + 0.01 * s for s in range(6)}
    kept = gate_verdict(compare_paired(better, worse), significant)
    assert kept.keep and kept.comparison.p_value == pytest.approx(1 / 64)
    assert gate_verdict(compare_paired(worse, better), significant).outcome == "rolled_back"
    tie = gate_verdict(compare_paired(better, better), significant)
    assert tie.outcome == "rolled_back" and "a gain of 5 points is ruled out" in tie.reason


@pytest.mark.parametrize("kwargs", [{"rule": "best"}, {"level": 0.0}, {"level": 5}, {"min_seeds": 0},
                                    {"min_gain": 0}])
def test_gate_policy_refuses_bad_settings_and_says_what_to_use(kwargs):
    with pytest.raises(ValueError, match="gate"):
        GatePolicy(**kwargs)


def test_the_gate_is_chosen_per_round_on_the_cli_and_in_dagster_config(capsys):
    from automem_dagster.cli import build_parser
    from automem_dagster.cli import main as cli_main
    from automem_dagster.commands.shared import gate_policy
    from automem_dagster.defs.common.config import RoundConfig

    args = build_parser().parse_args(["revise", "--game", "crafter", "--gate", "significant", "--gate-level", "0.1",
                                      "--gate-min-seeds", "8"])
    assert gate_policy(args) == GatePolicy("significant", 0.1, 8)
    args = build_parser().parse_args(["revise", "--game", "crafter", "--gate", "equal_score", "--gate-metric",
                                      "redundant_write_rate", "--gate-margin", "0.2", "--gate-min-gain", "3"])
    assert gate_policy(args) == GatePolicy("equal_score", 0.05, 5, "redundant_write_rate", 0.2, 3.0)
    assert RoundConfig(gate={"rule": "equal_score", "metric": "empty_search_rate"}).gate.policy().metric \
        == "empty_search_rate"
    assert gate_policy(build_parser().parse_args(["train", "--game", "crafter"])) == GatePolicy()
    assert RoundConfig(gate={"rule": "significant", "min_seeds": 8}).gate.policy() == GatePolicy("significant", 0.05, 8)
    assert cli_main(["revise", "--game", "crafter", "--gate", "significant", "--gate-level", "2"]) == 2
    assert "--gate-level" in capsys.readouterr().err


# --- the equal_score gate and the detectable gain ---------------------------------------------------

EQUAL = GatePolicy("equal_score", level=0.05, min_seeds=5, metric="input_tokens_per_step", margin=0.1)
SIX = range(6)
SCORES = {s: 0.1 * (s % 3) for s in SIX}  # 0, 10, 20 % again and again: seeds differ, sides tie
TOKENS = {s: 900.0 + 10 * s for s in SIX}


def equal_score(candidate, champion, candidate_tokens, champion_tokens, policy=EQUAL):
    from automem_dagster.metrics.paired import compare_metric

    metric = compare_metric(candidate, champion, candidate_tokens, champion_tokens, policy)
    return gate_verdict(compare_paired(candidate, champion), policy, metric)


def test_equal_score_keeps_a_cheaper_candidate_at_equal_score_that_the_papers_rule_ties():
    cheaper = {s: t - 80.0 for s, t in TOKENS.items()}
    assert not gate_verdict(compare_paired(SCORES, SCORES), HIGHER).keep  # higher_mean: a tie
    decision = equal_score(SCORES, SCORES, cheaper, TOKENS)
    assert decision.keep and "not worse" in decision.reason and "input_tokens_per_step" in decision.reason
    assert decision.metric.reduction == pytest.approx(80.0) and decision.metric.p_value == pytest.approx(1 / 64)
    assert decision.metric.relative_change == pytest.approx(-8000 / 925)


def test_equal_score_rolls_back_a_cheaper_candidate_that_plays_worse():
    worse = {s: max(v - 0.1, 0.0) for s, v in SCORES.items()} | {0: 0.0}
    decision = equal_score(worse, SCORES, {s: t - 80.0 for s, t in TOKENS.items()}, TOKENS)
    assert decision.outcome == "rolled_back" and "progression may be worse" in decision.reason
    assert decision.metric.progression_lower_bound < -1.0  # 10 % of the champion's 10 %


def test_equal_score_rolls_back_a_noisy_saving_and_too_few_seeds():
    noisy = {s: t + (-60.0 if s % 2 else 50.0) for s, t in TOKENS.items()}  # saves 5 on average, sign flips
    decision = equal_score(SCORES, SCORES, noisy, TOKENS)
    assert decision.outcome == "rolled_back" and "not lower beyond chance" in decision.reason
    assert decision.metric.reduction > 0
    few = {s: SCORES[s] for s in range(3)}
    small = equal_score(few, few, {s: 1.0 for s in few}, {s: 2.0 for s in few})
    assert small.outcome == "inconclusive" and "on 3 seeds" in small.reason


def test_equal_score_still_keeps_a_significant_gain_and_needs_its_metric():
    better = {s: v + 0.1 for s, v in SCORES.items()}
    assert equal_score(better, SCORES, TOKENS, TOKENS).keep
    with pytest.raises(ValueError, match="input_tokens_per_step"):
        gate_verdict(compare_paired(SCORES, SCORES), EQUAL)


@pytest.mark.parametrize("kwargs", [{"rule": "equal_score"}, {"rule": "equal_score", "metric": "score"},
                                    {"metric": "input_tokens_per_step"}, {"rule": "equal_score", "margin": -1,
                                                                          "metric": "empty_search_rate"},
                                    {"rule": "equal_score", "margin": 5, "metric": "empty_search_rate"}])
def test_equal_score_policy_refuses_a_missing_or_stray_metric(kwargs):
    with pytest.raises(ValueError, match="gate (metric|margin)"):
        GatePolicy(**kwargs)


def test_detectable_gain_matches_a_hand_worked_case():
    from automem_dagster.metrics.power import detectable_gain

    # Differences 0 and 10 points on 2 seeds: sample SD sqrt(50) = 7.071. higher_mean keeps any positive
    # mean, so at 80 % power the gain is z(0.8) * 7.071 / sqrt(2) = 0.8416 * 5 = 4.21 points, and 5 points
    # need ceil((0.8416 * 7.071 / 5)**2) = ceil(1.417) = 2 seeds.
    candidate, champion = {1: 0.3, 2: 0.2}, {1: 0.3, 2: 0.1}
    paper = detectable_gain(candidate, champion, HIGHER)
    assert paper.spread == pytest.approx(math.sqrt(50)) and paper.level == 0.5
    assert paper.smallest_gain == pytest.approx(0.841621 * 5, rel=1e-5)
    assert paper.seeds_for["5"] == 2 and paper.seeds_for["10"] == 1
    # The significant gate at 0.05: no gain shows on 2 seeds (min 5; a permutation p is >= 1/4 there);
    # 5 points need ceil(((1.6449 + 0.8416) * 7.071 / 5)**2) = ceil(12.37) = 13 seeds.
    strict = detectable_gain(candidate, champion, GatePolicy("significant"))
    assert strict.smallest_gain is None and "fewer than 5 seeds" in strict.note
    # 1 and 2 points: ceil((2.486 * 7.071)**2) = 310 and ceil((2.486 * 7.071 / 2)**2) = 78 seeds.
    assert strict.seeds_for == {"1": 310, "2": 78, "5": 13, "10": 5, "20": 5}
    assert "no gain detectable" in strict.describe() and "5 points: 13 seeds" in strict.describe()


def test_detectable_gain_says_when_the_seeds_show_no_spread():
    from automem_dagster.metrics.power import detectable_gain

    zero = detectable_gain({1: 0.0, 2: 0.0}, {1: 0.0, 2: 0.0}, HIGHER)
    assert zero.smallest_gain is None and zero.spread is None and "scored the same on both sides (0.00%)" in zero.note
    # Both sides vary across seeds by the same amount: the unpaired spread stands in for the paired one.
    same = detectable_gain({1: 0.1, 2: 0.3}, {1: 0.1, 2: 0.3}, HIGHER)
    assert same.spread_from.startswith("both sides") and same.spread == pytest.approx(20.0)


def test_dagsters_gate_check_previews_the_equal_score_gate_from_the_evaluations_per_seed_metric():
    from automem_dagster.defs.evaluation.checks import evaluation_gate_result
    from automem_dagster.defs.plans.values import Evaluation, EvaluationPlan

    cheaper = {s: t - 80.0 for s, t in TOKENS.items()}
    scores = {"per_seed": {"candidate": SCORES, "champion": SCORES},
              "per_seed_metric": {"candidate": cheaper, "champion": TOKENS}}
    plan = EvaluationPlan("crafter", 1, tuple(SCORES), 10, EQUAL)
    check = evaluation_gate_result(Evaluation(plan, "candidate", "champion", scores, {}, {}))
    assert check.passed and check.metadata["would"].value == "keep"
    # An evaluation recorded before the gate had a metric cannot be judged by it: refused, saying why.
    refused = evaluation_gate_result(Evaluation(plan, "candidate", "champion", {"per_seed": scores["per_seed"]}, {}, {}))
    assert not refused.passed and "did not record it" in refused.metadata["reason"].value


def test_a_sampled_permutation_p_value_counts_the_observed_assignment_and_is_never_0():
    from automem_dagster.metrics.resampling import EXACT_PERMUTATION_MAX_SEEDS, permutation_p_value

    # 40 equal gains (a 40-pair MiniHack suite): no sampled flip reaches the observed mean, yet the
    # p-value is the Monte Carlo (k + 1) / (N + 1), the smallest the test can resolve, never 0.
    gains = np.full(40, 0.05)
    assert len(gains) > EXACT_PERMUTATION_MAX_SEEDS
    assert permutation_p_value(gains, n_samples=999) == pytest.approx(1 / 1000)
    assert permutation_p_value(-gains, n_samples=999) == pytest.approx(1.0)


def test_higher_mean_on_a_zero_floor_needs_a_gain_the_seeds_spread_can_tell_from_none():
    """Issue 54: bit-identical A/A replays give a floor of 0, and one achievement more on one seed of six
    (Crafter: 1/22 = 4.55 points there, +0.76 on the mean) used to be kept. The seeds' bootstrap interval
    includes 0 for such a gain, so it is inconclusive, saying why and what the floor rests on; the same
    gain on every seed is clear of 0 and is kept."""
    champion = {seed: 0.0 for seed in range(42, 48)}
    one_seed = {**champion, 44: 1 / 22}
    decision = gate_verdict(compare_paired(one_seed, champion), HIGHER, floor=0.0,
                            floor_basis="one A/A pair, bootstrap over its 6 seeds, bit-identical replays")
    assert decision.outcome == "inconclusive" and "+0.76" in decision.reason
    assert "the seeds' spread must tell the difference from none" in decision.reason
    assert "noise floor 0.00 points (one A/A pair, bootstrap over its 6 seeds, bit-identical replays)" in decision.reason
    unmeasured = gate_verdict(compare_paired(one_seed, champion), HIGHER)
    assert unmeasured.outcome == "inconclusive" and "noise floor not measured" in unmeasured.reason
    every_seed = {seed: 1 / 22 for seed in champion}
    kept = gate_verdict(compare_paired(every_seed, champion), HIGHER, floor=0.0)
    assert kept.outcome == "kept" and "beyond the seeds' spread" in kept.reason
    lost = gate_verdict(compare_paired(champion, every_seed), HIGHER, floor=0.0)
    assert lost.outcome == "rolled_back"
    # A measured floor above 0 is read as before: the gain must clear it, the seeds' interval aside.
    assert gate_verdict(compare_paired(one_seed, champion), HIGHER, floor=0.5).outcome == "kept"
