"""Step ranges are written compactly (``meta/compress.py``)."""

from automem_dagster.meta.compress import ranges


def test_ranges_are_compact():
    assert ranges({1, 2, 3, 7, 9, 10}) == "1-3, 7, 9-10" and ranges(set()) == ""
