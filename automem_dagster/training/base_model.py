"""The base weights the memory specialist is trained on.

``embedded`` means the packaged SmolLM2-135M-Instruct GGUF (the same file the embedded server
serves), dequantized to fp32 by transformers; any other value is a Hugging Face model name or
local directory, used as given on a GPU machine. A GGUF-loaded model carries transformers'
GGUF quantizer marker, which makes peft/trl refuse to train and save it although the weights
are plain fp32 after dequantization, so the marker is cleared here (docs/install.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from automem_dagster.cpu_threads import threads_from_env

EMBEDDED_BASE = "embedded"


class BaseModelError(RuntimeError):
    """The base model could not be loaded; the message names it and what to do."""


@dataclass(frozen=True)
class BaseFacts:
    """What adapter export needs to know about the base: the architecture and attention heads
    (llama.cpp stores the q/k projections of llama-type models permuted by head)."""

    architecture: str
    n_head: int
    n_head_kv: int
    n_layer: int


def configure_torch_threads() -> None:
    """One core fewer than the machine has (``AUTOMEM_TORCH_THREADS`` overrides). Measured on the
    2-core machine: with a model server or a test run beside it, 2 OpenMP threads trained 5-10x
    slower than 1 (threads spin waiting for a core), at identical losses."""
    import torch

    torch.set_num_threads(threads_from_env("AUTOMEM_TORCH_THREADS", max(1, (os.cpu_count() or 2) - 1)))


def load_base(base: str = EMBEDDED_BASE):
    """(model, tokenizer) in fp32 for training or reference inference; ``base`` as in the module doc."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    configure_torch_threads()
    try:
        if base == EMBEDDED_BASE:
            from automem_dagster.llm.embedded_server import embedded_model_path

            path = embedded_model_path()
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
            _clear_gguf_marker(model)
        else:
            tokenizer = AutoTokenizer.from_pretrained(base)
            model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
    except (OSError, ValueError) as exc:
        raise BaseModelError(
            f"cannot load base model {base!r} ({type(exc).__name__}: {exc}); use `embedded` for the packaged "
            "SmolLM2 or a Hugging Face model directory that exists on this machine"
        ) from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def base_facts(model) -> BaseFacts:
    cfg = model.config
    return BaseFacts(cfg.model_type, cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None)
                     or cfg.num_attention_heads, cfg.num_hidden_layers)


def _clear_gguf_marker(model) -> None:
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def describe_base(base: str = EMBEDDED_BASE) -> dict:
    """Size facts of the base for the LoRA recommendation, from its config alone (no weights loaded)."""
    from transformers import AutoConfig

    try:
        if base == EMBEDDED_BASE:
            from automem_dagster.llm.embedded_server import embedded_model_path

            path = embedded_model_path()
            cfg = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
            name = f"SmolLM2-135M-Instruct ({path.name})"
        else:
            cfg = AutoConfig.from_pretrained(base)
            name = base
    except (OSError, ValueError) as exc:
        raise BaseModelError(f"cannot read the config of base model {base!r} ({exc}); use `embedded` or an existing "
                             "Hugging Face model directory") from exc
    h, layers = cfg.hidden_size, cfg.num_hidden_layers
    ffn = getattr(cfg, "intermediate_size", 4 * h)
    # Attention (4 h^2) and a gated MLP (3 h ffn) per layer, plus the embeddings.
    parameters = layers * (4 * h * h + 3 * h * ffn) + cfg.vocab_size * h
    return {"name": name, "hidden_size": h, "layers": layers, "parameters": parameters,
            "context": getattr(cfg, "max_position_embeddings", 2048)}
