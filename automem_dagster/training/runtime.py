"""The process a run trains in: which rank writes files, how many examples each process takes per
step, no Hugging Face Hub access, and narrower LM-head tiles on CPU."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from automem_dagster.training.settings import LoraSettings


def rank_zero() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def per_device_batch(settings: LoraSettings) -> int:
    """``settings.batch_size`` is the batch of one optimizer step over every process (``accelerate launch``)."""
    return max(1, settings.batch_size // int(os.environ.get("WORLD_SIZE", "1")))


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
