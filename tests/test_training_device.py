"""The training stage on any device: no model client needed to train, the effective batch over
several processes, losses that do not depend on the micro-batch, the step-time meter and the
device-sized micro-batch, all checked on the CPU."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_sft import TINY, _rows

from automem_dagster.training.runtime import per_device_batch, steps_per_epoch
from automem_dagster.training.sft import train_adapter
from automem_dagster.training.sft_config import trainer_configs
from automem_dagster.training.sft_result import TrainingError

ROOT = Path(__file__).resolve().parents[1]

BLOCKED_CLIENTS = """
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("openai", "aiohttp"):
            raise ImportError(f"{name} is not installed (blocked by the test)")

sys.meta_path.insert(0, Blocked())
"""


def test_training_the_embedded_base_needs_no_model_client(tmp_path):
    """What `pip install .[train]` gives: with openai and aiohttp unimportable, the embedded base loads
    and the trainer is built on it, and neither client is imported along the way."""
    import pandas as pd
    from test_sft import TINY, _rows

    pd.DataFrame(_rows(episodes=2, per_episode=2)).to_parquet(tmp_path / "dataset.parquet")
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


# --- several processes ---------------------------------------------------------------------------

@pytest.mark.parametrize("batch, world, per_device, steps", [(4, 1, 4, 3), (4, 2, 2, 3), (8, 4, 2, 2), (6, 3, 2, 2),
                                                           (16, 8, 2, 1)])
def test_the_effective_batch_is_the_batch_over_every_process(monkeypatch, tmp_path, batch, world, per_device, steps):
    """``batch_size`` examples per optimizer step over all processes: each takes its share, the trainer's
    micro-batches times accumulation make exactly that share, and an epoch of 10 examples is
    ceil(10 / batch_size) steps whatever the number of processes."""
    monkeypatch.setenv("WORLD_SIZE", str(world))
    settings = TINY.model_copy(update={"batch_size": batch})
    assert per_device_batch(settings) == per_device and per_device * world == batch
    assert steps_per_epoch(10, settings) == steps
    for micro in {1, per_device}:
        args, _ = trainer_configs(settings, tmp_path, max_steps=None, eval_every=1, save_every=1, seed=0,
                                  evaluate_first=False, gradient_checkpointing=False, micro_batch=micro)
        assert args.per_device_train_batch_size * args.gradient_accumulation_steps * world == batch


@pytest.mark.parametrize("batch, world, nearest", [(4, 8, "8"), (6, 4, "4 or 8"), (7, 2, "6 or 8"), (9, 4, "8"),
                                                   (11, 4, "12")])
def test_a_batch_the_processes_cannot_share_is_refused_before_training(monkeypatch, tmp_path, batch, world, nearest):
    monkeypatch.setenv("WORLD_SIZE", str(world))
    settings = TINY.model_copy(update={"batch_size": batch})
    message = rf"batch_size={batch} cannot be shared by {world} training processes.*the nearest being {nearest}$"
    with pytest.raises(TrainingError, match=message):
        per_device_batch(settings)
    pd.DataFrame(_rows()).to_parquet(tmp_path / "dataset.parquet")
    with pytest.raises(TrainingError, match=message):  # from the run's plan, before any model is loaded
        train_adapter(tmp_path, settings, tmp_path / "run", max_steps=1)
    assert not (tmp_path / "run").exists()
