"""What a training run is given and gives back: the files of its output directory, the result
record (``training.json``), its error, and the progress callback it calls."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

DATASET_FILE = "dataset.parquet"
CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"
RUN_FILE = "run.json"
RESULT_FILE = "training.json"

TrainingProgress = Callable[[int, int, dict[str, float]], None]

TRAIN_S_PER_STEP = "train_s_per_step"
VALIDATION_S_PER_PASS = "validation_s_per_pass"
FIGURES = (TRAIN_S_PER_STEP, VALIDATION_S_PER_PASS, "tokens_per_second", "peak_rss_mb")
"""The scalar figures of a result that the adapter's Dagster metadata, its MLflow training run and
the DVC stage's metrics show, under these same names."""


class TrainingError(RuntimeError):
    """The dataset, the output directory or the run cannot be used; the message says what to do."""


@dataclass
class TrainingResult:
    """What one training run produced and measured; ``training.json`` holds ``to_dict()``."""

    base: str
    dataset: str
    out_dir: str
    adapter_dir: str
    settings: dict[str, Any]
    fingerprint: str
    seed: int
    validation_fraction: float
    split_by: str  # "episode" or "example"
    examples_train: int
    examples_validation: int
    episodes_train: int
    episodes_validation: int
    examples_too_long: int  # dropped by trl: the completion starts beyond max_length
    max_steps: int
    global_step: int
    epochs: float
    eval_every: int
    save_every: int
    train_loss: list[list[float]] = field(default_factory=list)  # [step, loss]
    validation_loss: list[list[float]] = field(default_factory=list)  # [step, loss]
    initial_validation_loss: float | None = None
    final_validation_loss: float | None = None
    steps_this_run: int = 0
    # Timings of this process, named as on the console and in MLflow (``training/metering.py``).
    train_s_per_step: float | None = None  # one optimizer step, validation and checkpoints excluded
    validation_s_per_pass: float | None = None  # one pass over the validation set
    validation_passes: int = 0
    tokens_per_second: float | None = None  # non-padding tokens of this process's steps over their time
    tokens_trained: int = 0  # non-padding tokens over every step of the run, resumed ones included
    wall_s: float = 0.0  # this process's trainer.train(): steps, validation passes and checkpoint writes
    peak_rss_mb: float = 0.0
    resumed_from: str | None = None
    device: str = "cpu"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
