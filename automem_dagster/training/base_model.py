"""The base weights the memory specialist is trained on.

``embedded`` means the packaged SmolLM2-135M-Instruct GGUF (the same file the embedded server
serves), dequantized to fp32 by transformers; any other value is a Hugging Face model name or
local directory, used as given on a GPU machine. A GGUF-loaded model carries transformers'
GGUF quantizer marker, which makes peft/trl refuse to train and save it although the weights
are plain fp32 after dequantization, so the marker is cleared here (docs/install.md).

Reading the GGUF costs about 25 s on two cores (the tokenizer rebuilt from its vocabulary, every tensor
dequantized), and every training and every reload of a logged specialist pays it. The dequantized base
is therefore kept once in the user's cache (``base_cache_root``), under a key of the GGUF's content and
the transformers version that converted it, and read back in well under a second: the same fp32
weights and the same tokenizer, since they are what the conversion wrote.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from automem_dagster.cpu_threads import threads_from_env

EMBEDDED_BASE = "embedded"
MODEL_CONFIG = "config.json"
"""The Hugging Face model folder's config: a converted base is complete once it is there."""


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

            folder = embedded_base_folder()
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
            # Named as when read from the GGUF: adapters record it as their base (llm/adapter_base.py).
            name = str(embedded_model_path().parent)
            model.config._name_or_path = model.name_or_path = tokenizer.name_or_path = name
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


def base_cache_root() -> Path:
    """Where dequantized bases are kept: ``AUTOMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/automem_dagster``,
    else ``~/.cache/automem_dagster``."""
    if os.environ.get("AUTOMEM_CACHE_DIR"):
        return Path(os.environ["AUTOMEM_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "automem_dagster"


def embedded_base_folder() -> Path:
    """The packaged GGUF dequantized to an fp32 transformers folder (model and tokenizer), converted on the
    first call and kept under ``base_cache_root()``. Two processes converting at once each write a folder
    of their own and the first rename wins, so a reader never sees half a folder."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from automem_dagster.llm.embedded_server import embedded_model_path

    path = embedded_model_path()
    with path.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()[:16]
    folder = base_cache_root() / "bases" / f"{path.stem}-{digest}-transformers{transformers.__version__}"
    if (folder / MODEL_CONFIG).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".converting-"))
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        _clear_gguf_marker(model)
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        os.rename(scratch, folder)
    except OSError:
        if not (folder / MODEL_CONFIG).exists():  # not another process's finished conversion: a real error
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


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
    """Size facts of the base for the LoRA recommendation, from its config alone (no weights loaded); the
    packaged GGUF's from its metadata, parsed once per process and shared with the adapter export
    (``gguf_lora.gguf_header``). Measured on the 2-core machine under a load of 10: transformers' GGUF config
    reader took 5.5 s of CPU per call (its import 2.5 s more), the shared parse 3.8 s once."""
    try:
        if base == EMBEDDED_BASE:
            return _embedded_facts()
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(base)
    except (OSError, ValueError) as exc:
        raise BaseModelError(f"cannot read the config of base model {base!r} ({exc}); use `embedded` or an existing "
                             "Hugging Face model directory") from exc
    h, layers = cfg.hidden_size, cfg.num_hidden_layers
    ffn = getattr(cfg, "intermediate_size", 4 * h)
    return _size_facts(base, h, layers, ffn, cfg.vocab_size, getattr(cfg, "max_position_embeddings", 2048))


def _embedded_facts() -> dict:
    """``describe_base``'s facts of the packaged GGUF: the values transformers' GGUF config carries
    (``{arch}.embedding_length``, ``block_count``, ``feed_forward_length``, ``vocab_size``, ``context_length``)."""
    from automem_dagster.llm.embedded_server import embedded_model_path
    from automem_dagster.training.gguf_lora import gguf_header

    path = embedded_model_path()
    fields, _ = gguf_header(path)
    arch = fields["general.architecture"]
    return _size_facts(f"SmolLM2-135M-Instruct ({path.name})", fields[f"{arch}.embedding_length"],
                       fields[f"{arch}.block_count"], fields[f"{arch}.feed_forward_length"],
                       fields[f"{arch}.vocab_size"], fields[f"{arch}.context_length"])


def _size_facts(name: str, h: int, layers: int, ffn: int, vocab_size: int, context: int) -> dict:
    # Attention (4 h^2) and a gated MLP (3 h ffn) per layer, plus the embeddings.
    parameters = layers * (4 * h * h + 3 * h * ffn) + vocab_size * h
    return {"name": name, "hidden_size": h, "layers": layers, "parameters": parameters, "context": context}
