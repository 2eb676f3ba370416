"""How one process's share of the batch runs on its device: micro-batch, activation checkpointing,
precision of the base weights and padding-free batches.

The settings fix what is learned (``batch_size`` examples per optimizer step); this fixes how fast.
On a GPU the micro-batch is the largest divisor of the process's share whose activations fit the
device's free memory (``torch.cuda.mem_get_info``, the weights subtracted), the rest reached by
gradient accumulation, so the effective batch never changes and the result records the split.
Activation checkpointing (about a third more compute) is used only when even one example does not
fit without it. The base weights are bf16 only where the GPU computes bf16 natively
(``torch.cuda.is_bf16_supported(including_emulation=False)``; a T4 or V100 emulates it slowly) and
fp32 elsewhere. A micro-batch of several examples is padding-free: trl's collator concatenates the
examples into one sequence with per-example positions, so short examples pay for no padding.

On the CPU: one example per micro-batch (an unpadded sequence runs torch's memory-efficient
attention on the CPU, a padded or packed one the math path that stores every attention matrix),
fp32, and checkpointing only when the longest example's activations, by the same estimate, exceed
``CPU_ACTIVATION_BUDGET``, which keeps peak RSS under 4 GB. With a frozen base a step without
checkpointing is a forward and a backward pass instead of two forwards and a backward: on the
2-core machine (2026-12-07, the known-answer learning check's ~300-token examples, one thread) 28 %
less CPU time a step, identical losses, peak RSS 1.65 GB instead of 1.40 GB.

The activation estimate counts, per token and layer, the tensors a llama-type layer keeps for the
backward pass (about 10 hidden-size and 4 intermediate-size values; Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", table 2, without dropout and with
memory-efficient attention), doubled for autocast copies and allocator slack, plus trl's chunked
LM head and, for padding-free batches under SDPA, the block mask over the concatenated sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MEMORY_SHARE = 0.8
"""Of the free device memory, the share the plan may fill (the rest: CUDA context, fragmentation)."""
SLACK = 2.0
LM_HEAD_TILE = 32768  # trl 1.16's fused LM head: vocabulary columns per tile


@dataclass(frozen=True)
class ModelShape:
    """What the activation estimate needs of the base."""

    hidden: int
    intermediate: int
    layers: int
    vocab: int
    parameters: int

    @classmethod
    def of(cls, model) -> ModelShape:
        cfg = model.config
        return cls(cfg.hidden_size, getattr(cfg, "intermediate_size", 4 * cfg.hidden_size), cfg.num_hidden_layers,
                   cfg.vocab_size, sum(p.numel() for p in model.parameters()))


@dataclass(frozen=True)
class DevicePlan:
    micro_batch: int
    gradient_checkpointing: bool
    bf16: bool
    padding_free: bool
    free_memory_mb: float | None  # the device's free memory when planned; None on the CPU


CPU_ACTIVATION_BUDGET = 2 * 2**30
"""Bytes of estimated activations (``activation_bytes``) one CPU example may keep without checkpointing: the
estimate is about four times what the embedded base measured (300 tokens: 975 MB estimated, 250 MB
more peak RSS than with checkpointing), so the 660 tokens it admits stay well under 4 GB of RSS, and
1,900-token examples (3.1 GB peak with checkpointing) keep it."""


def native_bf16() -> bool:
    """A CUDA device that computes bf16 in hardware (Ampere and later), not by emulation."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def activation_bytes(shape: ModelShape, tokens: int, sequences: int, *, checkpointing: bool, element: int,
                     padding_free: bool) -> float:
    """Estimated bytes of activations kept for the backward pass of ``sequences`` examples, ``tokens`` in all."""
    layer = (10 * shape.hidden + 4 * shape.intermediate) * element * SLACK
    kept = (shape.layers * shape.hidden * element + layer) if checkpointing else shape.layers * layer
    head = 3 * min(shape.vocab, LM_HEAD_TILE) * 4  # one fp32 tile of logits, its softmax and gradient
    mask = tokens * tokens * element if padding_free and sequences > 1 else 0
    return tokens * (kept + head) + mask


def cpu_plan(longest_tokens: int, shape: ModelShape) -> DevicePlan:
    """One unpadded fp32 example per micro-batch, checkpointed only when its activations exceed the budget."""
    need = activation_bytes(shape, longest_tokens, 1, checkpointing=False, element=4, padding_free=False)
    return DevicePlan(1, need > CPU_ACTIVATION_BUDGET, False, False, None)


def plan_for_device(per_device: int, longest_tokens: int, shape: ModelShape, free_bytes: int | None,
                    bf16: bool) -> DevicePlan:
    """The plan for one process taking ``per_device`` examples per step, the longest ``longest_tokens`` long,
    on a device with ``free_bytes`` free (None: the CPU)."""
    if free_bytes is None:
        return cpu_plan(longest_tokens, shape)
    element = 2 if bf16 else 4
    budget = free_bytes * MEMORY_SHARE - shape.parameters * element
    divisors = [d for d in range(per_device, 0, -1) if per_device % d == 0]
    for checkpointing in (False, True):
        for micro in divisors:
            need = activation_bytes(shape, micro * longest_tokens, micro, checkpointing=checkpointing,
                                    element=element, padding_free=micro > 1)
            if need <= budget:
                return DevicePlan(micro, checkpointing, bf16, micro > 1, round(free_bytes / 2**20, 1))
    return DevicePlan(1, True, bf16, False, round(free_bytes / 2**20, 1))


def device_plan(per_device: int, longest_tokens: Callable[[], int], model) -> DevicePlan:
    """The plan for this machine: from the first CUDA device's free memory, or the CPU plan.
    ``longest_tokens`` tokenizes the examples (trl tokenizes them again when the trainer is built)."""
    import torch

    if not torch.cuda.is_available():
        return cpu_plan(longest_tokens(), ModelShape.of(model))
    free, _ = torch.cuda.mem_get_info()
    return plan_for_device(per_device, longest_tokens(), ModelShape.of(model), free, native_bf16())
