"""A proficiency round's gate may compare batches that differ in the memory role alone (``loop/gate.py``)."""

import pytest
from recorded_batches import recorded

from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.gate import paired_verdict


def test_a_proficiency_round_may_change_the_memory_role_alone(tmp_path):
    game = {"model": "base", "sampling": {"temperature": 0.7}}
    champion = recorded(tmp_path / "champion", {"game": game})
    specialist = recorded(tmp_path / "specialist", {"game": game, "memory": {"model": "base", "adapter": {"sha256": "a"}}})
    assert paired_verdict(specialist, champion, "specialist").comparison.n == 2
    with pytest.raises(RoundError, match=r"different roles\.memory\.adapter\.sha256, roles\.memory\.model"):
        paired_verdict(specialist, champion, "candidate")
    warmer = recorded(tmp_path / "warmer", {"game": {**game, "sampling": {"temperature": 1.0}}, "memory": {"model": "m"}})
    with pytest.raises(RoundError, match=r"different roles\.game\.sampling\.temperature: a specialist round"):
        paired_verdict(warmer, champion, "specialist")
