"""Which base model a LoRA adapter was trained on, checked against the base a server serves.

vLLM loads an adapter onto whatever base it serves and lists it with that base as ``parent``
(``vllm/entrypoints/openai/models/serving.py``); it does not compare the adapter's recorded base,
and an adapter whose matrices fit (or are broadcast into) another model's layers is served
without complaint. A specialist trained on the packaged SmolLM2 (hidden size 576, 30 layers)
could then be evaluated on a 32B model and its score credited to it. So the adapter's own record
is read before it is loaded: the base name peft wrote (``adapter_config.json``
``base_model_name_or_path``) and the hidden size and layer count its weights have (from the
safetensors header, no tensor read), and a mismatch with the served base is refused naming both.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

_LAYER = re.compile(r"\.layers\.(\d+)\.")
_HIDDEN_INPUTS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
"""Projections whose input is the hidden state: their ``lora_A`` is (rank, hidden size)."""


@dataclass(frozen=True)
class BaseIdentity:
    """A base model as far as it is known: its name (hub id or path), hidden size and layer count."""

    name: str | None
    hidden_size: int | None = None
    layers: int | None = None

    def describe(self) -> str:
        size = ", ".join(f"{label} {value}" for label, value in (("hidden size", self.hidden_size),
                                                                  ("layers", self.layers)) if value is not None)
        return f"{self.name or 'unnamed'}" + (f" ({size})" if size else "")


def short_name(name: str) -> str:
    """``Qwen/Qwen2.5-32B-Instruct`` and ``/models/Qwen2.5-32B-Instruct/`` -> ``qwen2.5-32b-instruct``: a hub
    id and a local copy of it compare equal."""
    return Path(name.rstrip("/")).name.lower()


def adapter_identity(adapter_dir: Path) -> BaseIdentity:
    """The base ``adapter_dir`` (a peft folder) records: its config's base name, and the hidden size
    and layer count of its weights where ``adapter_model.safetensors`` has a readable header."""
    folder = Path(adapter_dir)
    try:
        name = json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        name = None
    shapes = _safetensors_shapes(folder / "adapter_model.safetensors")
    hidden = next((shape[1] for key, shape in shapes.items() if ".lora_A." in key and len(shape) == 2
                   and any(f".{proj}." in key for proj in _HIDDEN_INPUTS)), None)
    layers = [int(m[1]) for key in shapes if (m := _LAYER.search(key))]
    return BaseIdentity(name or None, hidden, max(layers) + 1 if layers else None)


def _safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors file's header (8-byte little-endian length, then JSON);
    empty when the file is missing or not safetensors."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > 100_000_000:
                return {}
            header = json.loads(f.read(length))
    except (OSError, ValueError, struct.error):
        return {}
    return {k: v["shape"] for k, v in header.items() if isinstance(v, dict) and isinstance(v.get("shape"), list)}


def local_base_identity(name: str) -> BaseIdentity:
    """``name``'s hidden size and layer count from its ``config.json`` where ``name`` is a folder on this
    machine (a base served from a local path); only its name otherwise (nothing is downloaded)."""
    config = Path(name) / "config.json"
    try:
        data = json.loads(config.read_text())
        return BaseIdentity(name, data.get("hidden_size"), data.get("num_hidden_layers"))
    except (OSError, ValueError, AttributeError):
        return BaseIdentity(name)


def base_mismatch(adapter: BaseIdentity, served: BaseIdentity) -> str | None:
    """Why an adapter trained on ``adapter`` must not be served on ``served``, or None when they agree
    on every fact both sides know (the name always: an adapter without one cannot be placed)."""
    if adapter.name is None:
        return "the adapter records no base model (adapter_config.json has no base_model_name_or_path)"
    if served.name is not None and short_name(adapter.name) != short_name(served.name):
        return "the base names differ"
    for label, ours, theirs in (("hidden size", adapter.hidden_size, served.hidden_size),
                                ("layer count", adapter.layers, served.layers)):
        if ours is not None and theirs is not None and ours != theirs:
            return f"the {label}s differ"
    return None
