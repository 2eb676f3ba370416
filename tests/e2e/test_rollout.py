"""A rollout on the embedded model acts validly on every step."""

import json

import pytest
from builders import shipped_on_embedded

from automem_dagster.cli import main as cli_main


@pytest.mark.integration
def test_embedded_rollout_acts_validly_on_every_step(tmp_path, embedded):
    """The shipped embedded settings, served by the session's embedded model."""
    out = tmp_path / "embedded"
    assert cli_main(["rollout", "--game", "minihack:Corridor-R3", "--rollout-episodes", "2", "--rollout-max-steps", "4",
                     "--endpoints", str(shipped_on_embedded(tmp_path / "endpoints.yaml", embedded)),
                     "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [e["valid_action_rate"] for e in summary["episodes"]] == [1.0, 1.0]
    assert summary["behaviour"]["malformed_turn_rate"] == 0.0 and summary["behaviour"]["input_tokens_per_step"] > 0
