"""Export a trained peft LoRA adapter as a GGUF LoRA adapter for the embedded llama.cpp server.

vLLM serves a peft adapter directory as it is, but llama.cpp (and so the embedded server,
``embedded_server(..., lora=[path])``) only loads adapters in its own GGUF form. The server
keeps the base weights quantized and applies the adapter at run time, per request, as
``W x + scale * B (A x)`` with ``scale = request_scale * alpha / rank``: the same arithmetic as
peft's plain LoRA (``lora_alpha / r``), so a faithful export is a renaming plus two layout facts:

- llama.cpp names the projections ``blk.{i}.attn_q.weight`` ... and finds an adapter's pair as
  ``<base tensor name>.lora_a`` / ``.lora_b``. It checks ``lora_a`` has ne=[n_in, r] and
  ``lora_b`` ne=[r, n_out]; GGUF lists dimensions innermost first, so these are peft's own
  numpy shapes (r, n_in) and (n_out, r), written unchanged.
- For llama-type models the GGUF converter reorders the output rows of ``q_proj`` and
  ``k_proj`` within each head (the two rotary halves are interleaved, which is the layout
  llama.cpp's RoPE expects). ``B`` produces those rows, so its rows are reordered the same way,
  with the query head count for q and the key/value head count for k; ``A`` is unchanged.

Everything peft can express that this arithmetic cannot (DoRA, rsLoRA's alpha/sqrt(r), LoRA
biases, per-module alphas, fully trained extra modules, initialisations that rewrote the base
weights, adapters on embeddings or the LM head) is refused with ``AdapterExportError`` rather
than exported as a silently different model.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

# peft's saved key for one LoRA matrix of a decoder layer projection in a causal LM.
_PEFT_KEY = re.compile(
    r"^base_model\.model\.model\.layers\.(?P<layer>\d+)\.(?P<block>self_attn|mlp)\.(?P<module>\w+)"
    r"\.lora_(?P<ab>[AB])\.weight$"
)

# (peft block, peft module) -> llama.cpp tensor stem, for the architectures listed below.
_LLAMA_MODULES = {
    ("self_attn", "q_proj"): "attn_q",
    ("self_attn", "k_proj"): "attn_k",
    ("self_attn", "v_proj"): "attn_v",
    ("self_attn", "o_proj"): "attn_output",
    ("mlp", "gate_proj"): "ffn_gate",
    ("mlp", "up_proj"): "ffn_up",
    ("mlp", "down_proj"): "ffn_down",
}

# Architectures (general.architecture of the base GGUF) whose tensor naming is known here, and
# whether their converter permutes q/k rows per head. Others are refused: a wrong guess about
# either would load fine in llama.cpp and quietly serve a different model.
_ARCHITECTURES = {"llama": True}

# adapter_config.json options that change what the adapter computes in ways llama.cpp's
# ``scale * B (A x)`` cannot reproduce; any truthy value is refused, with the reason.
_UNSUPPORTED_OPTIONS = {
    "use_dora": "DoRA rescales the merged weight by a learned magnitude vector",
    "use_rslora": "rsLoRA scales by lora_alpha/sqrt(r), llama.cpp by alpha/r",
    "lora_bias": "LoRA bias vectors have no place in a GGUF LoRA adapter",
    "alpha_pattern": "llama.cpp applies one alpha to every module",
    "modules_to_save": "fully trained modules are not low-rank deltas",
    "trainable_token_indices": "trained token embeddings are not low-rank deltas",
    "target_parameters": "LoRA on raw parameters (e.g. MoE experts) has no llama.cpp mapping",
    "layer_replication": "replicated layers do not exist in the base GGUF",
    "fan_in_fan_out": "transposed (Conv1D) weights are not llama-type projections",
    "use_qalora": "QA-LoRA pools its input by quantisation group",
    "use_bdlora": "block-diagonal LoRA is a different product",
    "alora_invocation_tokens": "activated LoRA is not exported here",
    "megatron_config": "Megatron-parallel LoRA layers are not exported here",
    "velora_config": "VeLoRA changes the adapter computation",
    "monteclora_config": "MonteCLoRA changes the adapter computation",
    "arrow_config": "Arrow routes between several adapters",
    "kasa_config": "KaSA changes the adapter computation",
}

# init_lora_weights values after which the trained adapter no longer pairs with the original
# base weights (the initialisation rewrote them) or that select a different forward pass.
_UNSUPPORTED_INITS = ("pissa", "olora", "corda", "loftq", "mica")


class AdapterExportError(ValueError):
    """The adapter cannot be exported faithfully; the message names the file or field and what to do."""


def export_gguf_lora(adapter_dir: Path, out_path: Path, base_gguf: Path | None = None) -> Path:
    """Write the peft adapter in ``adapter_dir`` as a GGUF LoRA adapter at ``out_path``.

    ``base_gguf`` is the model it will be served on (default: the embedded SmolLM2 GGUF); its
    architecture, head counts and tensor shapes decide names and layout, and every adapter
    matrix is checked against it here, so a mismatch fails now with a named tensor instead of
    when the server loads the file. The file is written beside ``out_path`` and renamed over
    it, so a reader (a starting server) never sees half an adapter.
    """
    adapter_dir = Path(adapter_dir)
    out_path = Path(out_path)
    if base_gguf is None:
        from automem_dagster.llm.embedded_server import embedded_model_path

        base_gguf = embedded_model_path()
    config = _read_config(adapter_dir)
    alpha = _check_config(config, adapter_dir / ADAPTER_CONFIG)
    base_gguf = Path(base_gguf)
    if not base_gguf.is_file():
        raise AdapterExportError(f"base GGUF {base_gguf} does not exist; pass the model the adapter will be served on")
    base = _BaseModel.read(base_gguf)
    tensors = _read_weights(adapter_dir / ADAPTER_WEIGHTS)
    pairs = _map_tensors(tensors, base, adapter_dir / ADAPTER_WEIGHTS)
    _write(out_path, base.architecture, alpha, pairs)
    return out_path


def permute_rows(rows: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder the output rows of a q/k projection (or its LoRA ``B``) into llama.cpp's layout.

    Within each head, HF order is [first rotary half, second rotary half]; the GGUF converter
    interleaves them pairwise, which is what llama.cpp's RoPE (rotating adjacent pairs) needs.
    """
    n_rows = rows.shape[0]
    if n_rows % (2 * n_head):
        raise AdapterExportError(f"{n_rows} rows cannot be split into {n_head} heads of rotary pairs")
    return rows.reshape(n_head, 2, n_rows // n_head // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def unpermute_rows(rows: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of ``permute_rows``: llama.cpp row order back to HF order."""
    n_rows = rows.shape[0]
    return rows.reshape(n_head, n_rows // n_head // 2, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


class _BaseModel:
    """What the export needs from the base GGUF: architecture, head counts, tensor shapes."""

    def __init__(self, path: Path, architecture: str, n_head: int, n_head_kv: int, shapes: dict[str, tuple]):
        self.path = path
        self.architecture = architecture
        self.n_head = n_head
        self.n_head_kv = n_head_kv
        self.shapes = shapes

    @classmethod
    def read(cls, path: Path) -> _BaseModel:
        fields, shapes = gguf_header(path)
        field = fields.get

        arch = field("general.architecture")
        if arch not in _ARCHITECTURES:
            raise AdapterExportError(
                f"base GGUF {path} has general.architecture={arch!r}; the exporter knows only "
                f"{sorted(_ARCHITECTURES)} (tensor names and q/k layout differ per architecture): "
                "serve this adapter with vLLM, or add the architecture's mapping here"
            )
        n_head = field(f"{arch}.attention.head_count")
        if not isinstance(n_head, int) or n_head <= 0:
            raise AdapterExportError(f"base GGUF {path} lacks {arch}.attention.head_count; is it a complete model file?")
        n_head_kv = field(f"{arch}.attention.head_count_kv") or n_head  # absent: no grouped-query attention
        if not isinstance(n_head_kv, int) or n_head_kv <= 0 or n_head % n_head_kv:
            raise AdapterExportError(
                f"base GGUF {path} has {arch}.attention.head_count_kv={n_head_kv!r}, which does not divide "
                f"{n_head} query heads (per-layer head counts are not supported)"
            )
        return cls(path, arch, n_head, n_head_kv, shapes)


def gguf_header(path: Path) -> tuple[dict, dict[str, tuple]]:
    """A GGUF file's metadata values (its arrays, e.g. the vocabulary, left out) and tensor shapes, parsed
    once per file version in a process (``_parsed_header``): the export and the LoRA recommendation's base
    facts (``training.base_model.describe_base``) both read the embedded base."""
    path = Path(path).resolve()
    stat = path.stat()
    return _parsed_header(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _parsed_header(path: Path, mtime_ns: int, size: int) -> tuple[dict, dict[str, tuple]]:
    """Keyed by mtime and size too, so a replaced file is read again: GGUFReader decodes every
    metadata array, the 49k-entry vocabulary included, which takes seconds."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # the reader raises ValueError, struct errors, IndexError ...
        raise AdapterExportError(f"base GGUF {path} cannot be read ({type(exc).__name__}: {exc})") from exc
    fields = {key: f.contents() for key, f in reader.fields.items() if f.types[:1] != [gguf.GGUFValueType.ARRAY]}
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors}
    return fields, shapes


def _read_config(adapter_dir: Path) -> dict:
    if not adapter_dir.is_dir():
        raise AdapterExportError(
            f"adapter directory {adapter_dir} does not exist; pass the directory peft's save_pretrained wrote"
        )
    path = adapter_dir / ADAPTER_CONFIG
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise AdapterExportError(f"{path} is missing: {adapter_dir} is not a peft adapter directory") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterExportError(f"{path} is not readable JSON ({exc}); save the adapter again") from exc
    if not isinstance(config, dict):
        raise AdapterExportError(f"{path} holds a {type(config).__name__}, not a peft config object; save the adapter again")
    return config


def _check_config(config: dict, path: Path) -> float:
    """Refuse options the GGUF form cannot carry; return lora_alpha."""
    if config.get("peft_type") != "LORA":
        raise AdapterExportError(f"{path}: peft_type={config.get('peft_type')!r}; only LORA adapters can be exported to GGUF")
    for key, why in _UNSUPPORTED_OPTIONS.items():
        if config.get(key):
            raise AdapterExportError(
                f"{path}: {key}={config[key]!r} is not supported ({why}); retrain without it, "
                "or merge the adapter into the base weights and serve the merged model"
            )
    if config.get("bias", "none") != "none":
        raise AdapterExportError(
            f"{path}: bias={config['bias']!r} trains bias vectors, which a GGUF LoRA adapter cannot carry; "
            "retrain with bias='none'"
        )
    init = config.get("init_lora_weights")
    if isinstance(init, str) and init.lower().startswith(_UNSUPPORTED_INITS):
        raise AdapterExportError(
            f"{path}: init_lora_weights={init!r} changed the base weights or the forward pass, so the adapter does "
            "not fit the unmodified base; convert it to a plain LoRA first (peft's "
            "path_initial_model_for_weight_conversion) or merge and serve the merged model"
        )
    alpha = config.get("lora_alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        # llama.cpp reads alpha 0 as "no alpha/r scaling", which is not what peft means by it.
        raise AdapterExportError(f"{path}: lora_alpha={alpha!r}; a positive number is needed")
    return float(alpha)


def _read_weights(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not path.is_file():
        legacy = (path.parent / "adapter_model.bin").exists()
        hint = " (found adapter_model.bin: save with safe_serialization=True)" if legacy else ""
        raise AdapterExportError(f"{path} is missing{hint}; the exporter reads safetensors only")
    try:
        return load_file(path)
    except TypeError as exc:
        if "bfloat16" not in str(exc):
            raise AdapterExportError(f"{path} cannot be read ({exc})") from exc
        return _read_bf16_safetensors(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise AdapterExportError(f"{path} is not a valid safetensors file ({exc}); save the adapter again") from exc


def _read_bf16_safetensors(path: Path) -> dict[str, np.ndarray]:
    """safetensors' numpy loader cannot represent bfloat16 (numpy has no such dtype), so read the
    file directly: an 8-byte little-endian header length, a JSON header, then raw tensor bytes.
    bfloat16 is the top half of a float32, which makes widening exact."""
    dtypes = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
    raw = path.read_bytes()
    try:
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
    except (ValueError, UnicodeDecodeError) as exc:
        raise AdapterExportError(f"{path} is not a valid safetensors file ({exc}); save the adapter again") from exc
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        chunk = data[start:end]
        if info["dtype"] == "BF16":
            arr = (np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in dtypes:
            arr = np.frombuffer(chunk, dtype=np.dtype(dtypes[info["dtype"]]).newbyteorder("<"))
        else:
            raise AdapterExportError(f"{path}: tensor {name} has dtype {info['dtype']}, not a float type")
        out[name] = arr.reshape(info["shape"])
    return out


def _map_tensors(tensors: dict[str, np.ndarray], base: _BaseModel, path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """llama.cpp base tensor name -> (A, B) in float32, B permuted where the base's rows are."""
    found: dict[str, dict[str, np.ndarray]] = {}
    for key, value in tensors.items():
        m = _PEFT_KEY.match(key)
        stem = m and _LLAMA_MODULES.get((m["block"], m["module"]))
        if not stem:
            raise AdapterExportError(
                f"{path}: tensor {key!r} is not a LoRA matrix of a decoder-layer projection the exporter can map "
                f"(known: {', '.join(f'{b}.{mod}' for b, mod in _LLAMA_MODULES)}); retrain with target_modules "
                "limited to those, or merge the adapter and serve the merged model"
            )
        found.setdefault(f"blk.{int(m['layer'])}.{stem}.weight", {})[m["ab"]] = value
    if not found:
        raise AdapterExportError(f"{path} holds no LoRA tensors; is the adapter saved after training?")
    pairs = {}
    for name, ab in sorted(found.items()):
        if set(ab) != {"A", "B"}:
            raise AdapterExportError(f"{path}: {name} has lora_{''.join(ab)} but not its partner; save the adapter again")
        a, b = (np.ascontiguousarray(ab[k], dtype=np.float32) for k in ("A", "B"))
        shape = base.shapes.get(name)
        if shape is None:
            raise AdapterExportError(
                f"{path}: the base GGUF {base.path} has no tensor {name}; was the adapter trained on another model?"
            )
        n_in, n_out = shape[0], shape[1]
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != n_in or b.shape[0] != n_out or a.shape[0] != b.shape[1]:
            raise AdapterExportError(
                f"{path}: {name} lora_A {a.shape} / lora_B {b.shape} do not fit the base weight "
                f"(in {n_in}, out {n_out}) in {base.path}; was the adapter trained on another model?"
            )
        if _ARCHITECTURES[base.architecture] and name.endswith((".attn_q.weight", ".attn_k.weight")):
            b = permute_rows(b, base.n_head if ".attn_q." in name else base.n_head_kv)
        pairs[name] = (a, np.ascontiguousarray(b))
    return pairs


def _write(out_path: Path, architecture: str, alpha: float, pairs: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    import gguf

    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_path.parent, prefix=f".{out_path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp, architecture)  # writes general.architecture
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        for name, (a, b) in pairs.items():
            writer.add_tensor(f"{name}.lora_a", a)
            writer.add_tensor(f"{name}.lora_b", b)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
