"""Seeds are planned into shards by size and by count (``rollout/shards.py``)."""

import pytest

from automem_dagster.rollout.shards import plan_shards


def test_plan_shards_by_size_and_by_count():
    assert plan_shards([1, 2, 3, 4, 5], shard_size=2) == [[1, 2], [3, 4], [5]]
    assert plan_shards([1, 2, 3, 4, 5], shard_count=2) == [[1, 2, 3], [4, 5]]
    assert plan_shards([1, 2], shard_count=4) == [[1], [2]]
    for bad in ({}, {"shard_size": 2, "shard_count": 2}, {"shard_size": 0}, {"shard_count": 0}):
        with pytest.raises(ValueError, match="shard"):
            plan_shards([1, 2], **bad)
