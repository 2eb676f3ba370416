"""The process a run trains in: which rank writes files, how many examples each process takes per
step, no Hugging Face Hub access, and narrower LM-head tiles on CPU."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import sys
from collections.abc import Iterator

from automem_dagster.training.settings import LoraSettings
from automem_dagster.training.sft_result import TrainingError


def rank_zero() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def world_size() -> int:
    """Processes training together (``accelerate launch`` sets ``WORLD_SIZE``; one otherwise)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def per_device_batch(settings: LoraSettings) -> int:
    """Examples one process takes per optimizer step: ``settings.batch_size`` is the batch of one step over
    every process, exactly, so a batch the processes cannot share evenly is refused (rounding it would
    train with another batch than the one recorded, e.g. 4 on 8 GPUs as 8, 6 on 4 as 4)."""
    world = world_size()
    if settings.batch_size % world:
        below = settings.batch_size // world * world
        candidates = [n for n in (below, below + world) if n >= world]
        gap = min(abs(n - settings.batch_size) for n in candidates)
        ties = [n for n in candidates if abs(n - settings.batch_size) == gap]
        raise TrainingError(f"batch_size={settings.batch_size} cannot be shared by {world} training processes "
                            f"(WORLD_SIZE): give a multiple of {world}, the nearest being "
                            f"{' or '.join(map(str, ties))}")
    return settings.batch_size // world


def steps_per_epoch(examples: int, settings: LoraSettings) -> int:
    """Optimizer steps in one pass over ``examples`` training examples: one step per ``batch_size``
    examples over every process, the last one possibly short."""
    return math.ceil(examples / settings.batch_size)


def device_name(device) -> str:
    """The GPU's name (``NVIDIA H200``), or the CPU's with the torch threads a CPU run uses."""
    import torch

    if getattr(device, "type", None) == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch thread(s)"


def peak_device_memory_mb(device) -> float | None:
    """Torch's peak allocation on the GPU in MiB since the process started; None on the CPU (peak RSS says it there)."""
    import torch

    if getattr(device, "type", None) != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """No Hugging Face Hub requests for the duration: the env flag for code that reads it later, and
    huggingface_hub's own flag, which it reads once at import."""
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    saved_constant = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved
        if constants is not None:
            constants.HF_HUB_OFFLINE = saved_constant


CPU_LM_HEAD_TILE = 4096
"""Vocabulary columns per tile of trl's fused LM head on CPU. trl 1.16 uses 32768 (tuned for GPUs): on CPU
each tile is copied a few times in fp32, which for one 1,900-token sequence of the embedded base peaked
at 1.9 GB for the head alone, against 0.2 GB with 4096-column tiles, at the same speed."""


@contextlib.contextmanager
def cpu_lm_head_tiles(device) -> Iterator[None]:
    """Narrower LM-head tiles for the duration when training on CPU (trl reads the module constant per
    call; a trl without it is left alone)."""
    from trl.trainer import utils as trl_utils

    name = "_CHUNKED_LOGPROB_CHUNK_SIZE"
    saved = getattr(trl_utils, name, None)
    if getattr(device, "type", str(device)) != "cpu" or saved is None:
        yield
        return
    setattr(trl_utils, name, min(saved, CPU_LM_HEAD_TILE))
    try:
        yield
    finally:
        setattr(trl_utils, name, saved)
