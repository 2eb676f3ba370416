"""v0 played twice on the embedded server at the default concurrency repeats every episode bit for bit.

Issue 54: a round at ``--concurrency 2`` had parted from its A/A replay at the first step, so a champion
batch reused under a one-at-a-time A/A was not the bar it was taken for. Each play here is a fresh CLI
rollout (its own embedded server, as a rerun gets) with two episodes at once, and the two plays are
compared as the A/A record compares them (``loop.noise.differing_seeds``: every step's observation,
action, reward and progression and every model turn's text, operations and tokens).
"""

import json

import pytest

from automem_dagster.cli import main as cli_main
from automem_dagster.loop.noise import differing_seeds
from automem_dagster.options import BUDGET


@pytest.mark.server
def test_v0_played_twice_at_the_default_concurrency_repeats_every_seed(tmp_path):
    concurrency = BUDGET.concurrency
    assert concurrency >= 2       # the default plays episodes side by side, which is what this checks
    plays = []
    for arm in ("a", "b"):
        out = tmp_path / arm
        assert cli_main(["rollout", "--game", "crafter", "--seeds", "42-43", "--rollout-max-steps", "2",
                         "--concurrency", str(concurrency), "--out", str(out)]) == 0
        plays.append(out)
    assert differing_seeds(*plays) == []
    identity = json.loads((plays[0] / "batch.json").read_text())["identity"]
    assert identity["roles"]["game"]["replay"]["any_concurrency"] and "concurrency" not in identity
    steps = [line for path in sorted((plays[0] / "trajectories").glob("*.jsonl"))
             for line in map(json.loads, path.read_text().splitlines()) if "action" in line]
    assert len(steps) == 4 and all(s["turns"] for s in steps)   # the model was asked at every step of both seeds
