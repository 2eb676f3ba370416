"""A paired change worked by hand (``metrics/resampling.py``)."""

import pytest

from automem_dagster.metrics.resampling import paired_change


def test_a_paired_change_is_worked_by_hand():
    # differences -1 and -3: mean -2 of a first mean 6 is -33 %; both negative, so 1 of 4 sign flips is as
    # extreme on each side: two-sided p 0.5
    c = paired_change({1: 3.0, 2: 5.0}, {1: 4.0, 2: 8.0})
    assert (c.before, c.after, c.difference, c.n) == (6.0, 4.0, -2.0, 2)
    assert c.relative_change == pytest.approx(-100 / 3) and c.p_value == pytest.approx(0.5)
    assert -3.0 <= c.ci_low <= c.ci_high <= -1.0
    with pytest.raises(ValueError, match="same seeds"):
        paired_change({1: 1.0}, {2: 1.0})
