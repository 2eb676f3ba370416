"""The trainer's progress and timing: one line per logged step on stderr with an ETA, relayed to
the caller's ``progress``, and the figures of the result (``training.json``).

A run spends its time three ways: optimizer steps, validation passes and checkpoint writes. Each
timing has one name, used alike on the console, in the relayed progress, in the result and in
MLflow, so a figure read in one place is the figure read in another:

- ``train_s_per_step``: the median seconds of one optimizer step of this process (forward,
  backward and update over its micro-batches) after the first ``WARMUP_STEPS`` (a first CUDA step
  compiles kernels and fills the allocator), validation and checkpoints excluded; on a GPU the device
  is synchronised at both ends of a step, so the time is the device's work, not the queueing of it;
- ``tokens_per_second``: the non-padding tokens of the same steps over their summed seconds;
- ``validation_s_per_pass``: mean seconds of one pass over the validation set (trainer's
  ``eval_runtime``);
- the result's ``wall_s``: the whole ``trainer.train()`` of this process, all three included.
"""

from __future__ import annotations

import math
import statistics
import time

from automem_dagster.eta import format_duration
from automem_dagster.training.sft_result import (
    TOKENS_PER_SECOND,
    TRAIN_S_PER_STEP,
    VALIDATION_S_PER_PASS,
    TrainingProgress,
)

WARMUP_STEPS = 1
"""Steps of a process left out of its step time (all of them count when the run has no more)."""


def validation_passes_left(step: int, total: int, every: int) -> int:
    """Validation passes still to run when step ``step`` of ``total`` has just been logged: the
    trainer logs a step before it validates, so a pass at ``step`` itself is still ahead. One pass
    every ``every`` steps, and one after the last step when it is not a multiple (transformers'
    ``DefaultFlowCallback``)."""
    return total // every - (step - 1) // every + (1 if total % every else 0)


def eta_seconds(figures: dict[str, float], step: int, total: int, every: int | None) -> float:
    """Seconds left after ``step`` of ``total``: the steps left at ``train_s_per_step`` and the
    validation passes left at ``validation_s_per_pass`` (none counted before one has been timed)."""
    if TRAIN_S_PER_STEP not in figures:
        return math.nan
    passes = validation_passes_left(step, total, max(1, int(every or 1)))
    return figures[TRAIN_S_PER_STEP] * (total - step) + figures.get(VALIDATION_S_PER_PASS, 0.0) * passes


def synchronise(device) -> None:
    """Wait for a GPU's queued work, so a step's wall time is the step's (a no-op off CUDA)."""
    if getattr(device, "type", None) == "cuda":
        import torch

        torch.cuda.synchronize(device)


def timing_figures(step_seconds: list[float], step_tokens: list[int], validation_seconds: list[float]) -> dict[str, float]:
    """The timings measured so far, by their shared names (a figure not measured yet is absent): the
    median step after the warm-up, tokens a second over the same steps, the mean validation pass."""
    figures = {}
    if step_seconds:
        warm = WARMUP_STEPS if len(step_seconds) > WARMUP_STEPS else 0
        seconds = step_seconds[warm:]
        figures[TRAIN_S_PER_STEP] = statistics.median(seconds)
        if sum(seconds) > 0:
            figures[TOKENS_PER_SECOND] = sum(step_tokens[warm:]) / sum(seconds)
    if validation_seconds:
        figures[VALIDATION_S_PER_PASS] = statistics.fmean(validation_seconds)
    return figures


def meter_callback(progress: TrainingProgress | None, stream):
    """The progress and timing callback (a ``TrainerCallback``; imported lazily with transformers)."""
    from transformers import TrainerCallback

    class Meter(TrainerCallback):
        """Prints one line per log, relays it to ``progress`` and times the optimizer steps and
        validation passes of this process."""

        def __init__(self) -> None:
            self.step_seconds: list[float] = []
            self.step_tokens: list[int] = []
            self.validation_seconds: list[float] = []
            self._tokens_mark = 0
            self._began = 0.0

        def figures(self) -> dict[str, float]:
            return timing_figures(self.step_seconds, self.step_tokens, self.validation_seconds)

        def on_train_begin(self, args, state, control, **kwargs):
            self._tokens_mark = state.num_input_tokens_seen

        def on_step_begin(self, args, state, control, **kwargs):
            synchronise(args.device)
            self._began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            synchronise(args.device)
            self.step_seconds.append(time.perf_counter() - self._began)
            self.step_tokens.append(state.num_input_tokens_seen - self._tokens_mark)
            self._tokens_mark = state.num_input_tokens_seen

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = {k: v for k, v in (logs or {}).items() if isinstance(v, int | float)}
            step, total = state.global_step, state.max_steps
            if "eval_loss" in logs:
                if "eval_runtime" in logs:
                    self.validation_seconds.append(float(logs["eval_runtime"]))
                logs |= {k: v for k, v in self.figures().items() if k == VALIDATION_S_PER_PASS}
                line = f"step {step}/{total}  validation loss {logs['eval_loss']:.4f}"
                if VALIDATION_S_PER_PASS in logs:
                    line += f"  {VALIDATION_S_PER_PASS} {logs[VALIDATION_S_PER_PASS]:.2f}"
            elif "loss" in logs:
                figures = self.figures()
                logs |= {k: v for k, v in figures.items() if k == TRAIN_S_PER_STEP}
                eta = format_duration(eta_seconds(figures, step, total, state.eval_steps))
                line = (f"step {step}/{total}  loss {logs['loss']:.4f}  lr {logs.get('learning_rate', 0):.2e}  "
                        f"{TRAIN_S_PER_STEP} {logs.get(TRAIN_S_PER_STEP, math.nan):.2f}  eta {eta}")
            else:
                return
            if state.is_world_process_zero:
                print(line, file=stream, flush=True)
                if progress is not None:
                    progress(step, total, logs)

    return Meter()
