"""Seeded random plays fingerprinted in fresh interpreters (``replay_fingerprint.py``), and the check that
several such runs agree step for step: reproducibility across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPLAY_SCRIPT = Path(__file__).with_name("replay_fingerprint.py")


def replay_fingerprints(game: str, steps: int, seeds: tuple[int, ...], **env: str) -> dict:
    """The fingerprints of one fresh interpreter with ``env`` added to its environment."""
    done = subprocess.run([sys.executable, str(REPLAY_SCRIPT), game, str(steps), *map(str, seeds)],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def assert_all_agree(runs: list[dict]) -> None:
    first = runs[0]
    for index, run in enumerate(runs[1:], start=1):
        for seed, print_ in first.items():
            other = run[seed]
            if other["all"] != print_["all"]:
                parted = next(i for i, (a, b) in enumerate(zip(print_["steps"], other["steps"], strict=False)) if a != b)
                pytest.fail(f"seed {seed}: process {index} parted from process 0 at step {parted}")
