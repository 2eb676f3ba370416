"""Training needs no model client: what ``pip install .[train]`` gives loads the embedded base and builds
the trainer with openai and aiohttp unimportable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sft_examples import TINY, decision_rows

ROOT = Path(__file__).resolve().parents[2]

BLOCKED_CLIENTS = """
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("openai", "aiohttp"):
            raise ImportError(f"{name} is not installed (blocked by the test)")

sys.meta_path.insert(0, Blocked())
"""


@pytest.mark.e2e
def test_training_the_embedded_base_needs_no_model_client(tmp_path):
    """What `pip install .[train]` gives: with openai and aiohttp unimportable, the embedded base loads
    and the trainer is built on it, and neither client is imported along the way."""
    import pandas as pd

    pd.DataFrame(decision_rows(episodes=2, per_episode=2)).to_parquet(tmp_path / "dataset.parquet")
    script = BLOCKED_CLIENTS + f"""
from pathlib import Path
from automem_dagster.training.base_model import load_base
from automem_dagster.training.settings import LoraSettings
from automem_dagster.training.sft import build_trainer, plan_run

settings = LoraSettings.model_validate_json({TINY.model_dump_json()!r})
plan = plan_run(Path({str(tmp_path)!r}), settings, Path({str(tmp_path / "run")!r}), base="embedded", max_steps=1,
                validation_fraction=0.5, eval_every=None, save_every=None, seed=0)
model, tokenizer = load_base("embedded")
trainer = build_trainer(model, tokenizer, [plan.rows[i] for i in plan.split.train],
                        [plan.rows[i] for i in plan.split.validation], settings, Path({str(tmp_path / "ckpt")!r}),
                        max_steps=1)
assert len(trainer.train_dataset) == 2
print("loaded:", sorted(m for m in ("openai", "aiohttp") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TQDM_DISABLE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "loaded: []"
