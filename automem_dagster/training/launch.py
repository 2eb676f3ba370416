"""LoRA training as its own process, its progress streamed back to whoever launched it.

The trainer holds gigabytes (the base model, optimizer state, activations) and on a GPU machine
wants every device: inside a Dagster run worker or the CLI's process it would share their memory
and die with them. So the loops launch ``python -m automem_dagster.training.sft`` (``accelerate
launch`` over every GPU when there are several) and read its standard output, where ``--events``
makes the trainer print one JSON line per logged step; those reach the caller's ``progress``
(the CLI's bar, Dagster's run log), and the trainer's human lines go on to standard error as
before. A launch after a killed one resumes from the run folder's checkpoints (the trainer's own
resume), and a run stopped from outside (Ctrl-C, a Dagster run terminated) stops the trainer too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from automem_dagster.training.settings import LoraSettings
from automem_dagster.training.sft_result import RESULT_FILE, TrainingError, TrainingProgress, TrainingResult

EVENT_PREFIX = "automem-training-event "
"""Marks the trainer's event lines on standard output (anything else there is passed on as text)."""
STOP_GRACE_S = 30.0
TAIL_LINES = 20


def gpu_count() -> int:
    """CUDA devices this machine offers the trainer (torch is installed with the ``train`` extra)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def training_command(dataset_dir: Path, settings_file: Path, out_dir: Path, base: str, gpus: int,
                     **options: int | None) -> list[str]:
    """The trainer's command line: plain Python on CPU or one GPU, ``accelerate launch`` over several GPUs.
    ``options`` are the trainer's own (``max_steps``, ``eval_every``, ``save_every``), passed when set."""
    args = ["-m", "automem_dagster.training.sft", "--events", "--dataset", str(dataset_dir), "--settings",
            str(settings_file), "--out", str(out_dir), "--base", base]
    for name, value in options.items():
        if value is not None:
            args += [f"--{name.replace('_', '-')}", str(value)]
    if gpus > 1:
        accelerate = shutil.which("accelerate") or str(Path(sys.executable).with_name("accelerate"))
        return [accelerate, "launch", "--num_processes", str(gpus), *args]
    return [sys.executable, *args]


def trainer_environment() -> dict[str, str]:
    """This process's environment, with tqdm's bars off in the trainer: the libraries' own bars
    (transformers' "Converting and de-quantizing GGUF tensors" and "Loading weights" as the base
    loads) would reach the caller's console line by line through the relay, while the training's
    progress reaches it as events (``--events``). Warnings and errors still come through."""
    return {**os.environ, "TQDM_DISABLE": "1"}


def launch_training(dataset_dir: Path, settings: LoraSettings, out_dir: Path, *, base: str, max_steps: int | None = None,
                    eval_every: int | None = None, save_every: int | None = None,
                    progress: TrainingProgress | None = None, text: Callable[[str], None] | None = None,
                    gpus: int | None = None) -> TrainingResult:
    """Train (or resume) an adapter into ``out_dir`` in a child process and return its result.

    ``progress(step, total, logs)`` gets each logged step as it happens; ``text`` each line the
    trainer writes for people (default: this process's standard error)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings_file = out_dir / "launch-settings.json"
    settings_file.write_text(settings.model_dump_json(indent=2))
    command = training_command(Path(dataset_dir), settings_file, out_dir, base, gpu_count() if gpus is None else gpus,
                               max_steps=max_steps, eval_every=eval_every, save_every=save_every)
    say = text or (lambda line: print(line, file=sys.stderr, flush=True))
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                             env=trainer_environment())
    relay = threading.Thread(target=_relay_text, args=(child.stderr, say, tail), daemon=True)
    relay.start()
    try:
        for line in child.stdout:
            _relay_event(line.rstrip("\n"), progress, say)
        code = child.wait()
    except BaseException:
        _stop(child)
        raise
    relay.join(timeout=5)
    if code != 0:
        raise TrainingError(f"the trainer ({' '.join(command[:4])} ...) exited with {code}; its last lines:\n"
                            + "\n".join(tail) + f"\nrerun to resume from the checkpoints in {out_dir}")
    return TrainingResult(**json.loads((out_dir / RESULT_FILE).read_text()))


def _relay_event(line: str, progress: TrainingProgress | None, say: Callable[[str], None]) -> None:
    if not line.startswith(EVENT_PREFIX):
        if line.strip():
            say(line)
        return
    event = json.loads(line.removeprefix(EVENT_PREFIX))
    if progress is not None:
        progress(event["step"], event["total"], event["logs"])


def _relay_text(stream, say: Callable[[str], None], tail: deque[str]) -> None:
    for line in stream:
        line = line.rstrip("\n")
        tail.append(line)
        say(line)


def _stop(child: subprocess.Popen) -> None:
    """Stop the trainer when its launcher is stopped; a checkpoint it was writing is dropped by the next launch."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
