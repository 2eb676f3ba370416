"""``benchmarks/gate_calibration.py``: the gates' false-keep rate on resampled A/A pairs and their power
against planted gains. The quick run checks the benchmark works; the method checks below hold whatever
the draw, by construction of the gates (they check the rules' judgment, not AutoMem's results)."""

from test_benchmarks import _run

from benchmarks.gate_calibration import RECORDED, calibrate


def test_gate_calibration_quick(tmp_path, capsys):
    result = _run("gate_calibration", tmp_path, capsys)
    rows = {(r["gate"], r["seeds"]): r for r in result["results"]["rows"]}
    assert set(rows) == {(g, n) for g in ("higher_mean", "significant", "equal_score") for n in (2, 10)}
    assert result["settings"]["a_a_set"].startswith("recorded Crafter v0") and result["settings"]["a_a_seeds"] == 6
    assert all(0.0 <= r[k] <= 1.0 for r in rows.values() for k in ("0", "1", "2", "5"))


def test_method_check_no_gate_but_higher_mean_keeps_anything_on_two_seeds():
    # significant and equal_score decide on 5 seeds or more: on the demo's 2 seeds nothing is kept, gain or not
    for row in calibrate(RECORDED, [2], 20):
        if row["gate"] != "higher_mean":
            assert row["0"] == row["1"] == row["2"] == row["5"] == 0.0


def test_method_check_on_10_seeds_significant_keeps_no_a_a_pair_and_keeps_a_5_point_gain():
    rows = {r["gate"]: r for r in calibrate(RECORDED, [10], 40)}
    assert rows["significant"]["0"] == rows["equal_score"]["0"] == 0.0
    assert rows["significant"]["5"] >= 0.9 and rows["equal_score"]["5"] >= 0.9
