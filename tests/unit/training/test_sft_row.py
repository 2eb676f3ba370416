"""The SFT row is one model that curation writes and training reads (``training/sft_row.SFTRow``)."""

from __future__ import annotations

import asyncio

import pytest
from curation_episodes import SCAFFOLD, settings, write_episode

from automem_dagster.meta.curate import curate
from automem_dagster.training.examples import load_examples
from automem_dagster.training.sft_row import REQUIRED_COLUMNS, SFTRow, row_problem


def test_the_rows_curation_writes_are_the_rows_training_reads(tmp_path):
    write_episode(tmp_path / "batch", 1234)
    result = asyncio.run(curate([tmp_path / "batch"], SCAFFOLD, [42], tmp_path / "data", settings()))
    rows = load_examples(tmp_path / "data")
    assert len(rows) == result.examples == 5
    assert all(tuple(r) == REQUIRED_COLUMNS and row_problem(r) is None for r in rows)
    assert SFTRow.model_validate(rows[0]).completion[0].role == "assistant"


GOOD = {"prompt": [{"role": "system", "content": "You keep the memory."}, {"role": "user", "content": "Phase: LOG."}],
        "completion": [{"role": "assistant", "content": "<|DONE|>"}], "episode": "crafter__seed1", "seed": 1,
        "step": 0, "phase": "log", "turn": 0, "score": 1.0}


@pytest.mark.parametrize("change, problem", [
    ({"seed": "1"}, "`seed`: Input should be a valid integer (got '1')"),
    ({"score": "1.0"}, "`score`: Input should be a valid number (got '1.0')"),
    ({"effect_method": "guessed"}, "`effect_method`: Input should be 'replayed' or 'unmeasured' (got 'guessed')"),
    ({"extra": 1}, "`extra`: Extra inputs are not permitted (got 1)"),
    ({"completion": []}, "`completion`: List should have at least 1 item after validation, not 0 (got [])"),
    ({"prompt": [GOOD["prompt"][1], GOOD["prompt"][0]]},
     "prompt roles ['user', 'system']: a system message may only come first"),
])
def test_a_malformed_row_is_refused_with_what_is_wrong(change, problem):
    assert row_problem(GOOD) is None
    assert row_problem({**GOOD, **change}) == problem
