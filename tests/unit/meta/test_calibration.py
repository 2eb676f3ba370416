"""Spearman's rank correlation says nothing below three pairs or on a constant side (``meta/calibration.py``)."""

from automem_dagster.meta.calibration import spearman


def test_spearman_says_nothing_below_three_pairs_or_on_a_constant_side():
    assert spearman([1.0, 2.0], [2.0, 1.0]) is None
    assert spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) is None
    assert spearman([1.0, 2.0, 3.0], [30.0, 10.0, 20.0]) == -0.5
