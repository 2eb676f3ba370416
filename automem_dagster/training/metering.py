"""The trainer's progress and timing: one line per logged step on stderr with an ETA, relayed to
the caller's ``progress``, and the optimizer steps of this process timed for the result's figures."""

from __future__ import annotations

import math
import time

from automem_dagster.training.sft_result import TrainingProgress


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def meter_callback(progress: TrainingProgress | None, stream):
    """The progress and timing callback (a ``TrainerCallback``; imported lazily with transformers)."""
    from transformers import TrainerCallback

    class Meter(TrainerCallback):
        """Prints one line per log, relays it to ``progress`` and times the optimizer steps of this process."""

        def __init__(self) -> None:
            self.step_seconds: list[float] = []
            self.tokens_start = 0
            self.tokens_end = 0
            self._began = 0.0
            self._t0 = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            self._t0 = time.perf_counter()
            self.tokens_start = self.tokens_end = state.num_input_tokens_seen

        def on_step_begin(self, args, state, control, **kwargs):
            self._began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.step_seconds.append(time.perf_counter() - self._began)
            self.tokens_end = state.num_input_tokens_seen

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = {k: v for k, v in (logs or {}).items() if isinstance(v, int | float)}
            step, total = state.global_step, state.max_steps
            if "eval_loss" in logs:
                line = f"step {step}/{total}  validation loss {logs['eval_loss']:.4f}"
            elif "loss" in logs:
                done = len(self.step_seconds)
                per_step = (time.perf_counter() - self._t0) / done if done else math.nan
                line = (f"step {step}/{total}  loss {logs['loss']:.4f}  lr {logs.get('learning_rate', 0):.2e}  "
                        f"{per_step:.2f} s/step  eta {_duration(per_step * (total - step))}")
            else:
                return
            if state.is_world_process_zero:
                print(line, file=stream, flush=True)
                if progress is not None:
                    progress(step, total, logs)

    return Meter()
