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
TOKENS_PER_SECOND = "tokens_per_second"
FIGURES = (TRAIN_S_PER_STEP, VALIDATION_S_PER_PASS, TOKENS_PER_SECOND, "peak_rss_mb", "peak_device_memory_mb")
"""The scalar figures of a result that the adapter's Dagster metadata, its MLflow training run and
the DVC stage's metrics show, under these same names."""
TRAINED_ON = ("device", "device_name", "precision", "micro_batch", "gradient_accumulation", "gradient_checkpointing",
              "padding_free")
"""What a result says of how its steps ran (the MLflow training run's ``trained_on.*`` params): the same
settings train with other micro-batches, precision and memory savings on other devices."""


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
    tokens_per_second: float | None = None  # non-padding tokens of this process's steps after warm-up over their time
    tokens_trained: int = 0  # non-padding tokens over every step of the run, resumed ones included
    wall_s: float = 0.0  # this process's trainer.train(): steps, validation passes and checkpoint writes
    peak_rss_mb: float = 0.0
    peak_device_memory_mb: float | None = None  # torch's peak allocation on the GPU; None on the CPU (see peak_rss_mb)
    resumed_from: str | None = None
    device: str = "cpu"
    device_name: str = ""  # the GPU's name, or the CPU's with the torch threads used
    precision: str = "fp32"  # of the base weights: "bf16" on GPUs with native bf16, else "fp32"
    micro_batch: int = 1  # examples per forward pass of one process
    gradient_accumulation: int = 1  # micro-batches per optimizer step of one process
    gradient_checkpointing: bool = True
    padding_free: bool = False  # a micro-batch's examples concatenated into one sequence, no padding

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
