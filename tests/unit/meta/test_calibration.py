"""Counterfactual credit, and curation checked against a known answer (not the paper's result).

The key-and-door game (``examples/keydoor_plugin``, registered here through its entry point as
``pip install`` would) shows the key's wing once; only a note of it, read at the junction, gets
the agent through the door. Its scripted model (``standins/keydoor_rules.py``, served by the
scripted stand-in) acts on what its PLAN read shows and writes junk beside the useful note. So
which decisions matter is known in advance, and the method must find exactly those.
"""

from automem_dagster.meta.calibration import spearman


def test_spearman_says_nothing_below_three_pairs_or_on_a_constant_side():
    assert spearman([1.0, 2.0], [2.0, 1.0]) is None
    assert spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) is None
    assert spearman([1.0, 2.0, 3.0], [30.0, 10.0, 20.0]) == -0.5
