"""GGUF LoRA export: names, shapes, alpha and q/k layout against a hand-made adapter, and clear refusals."""

import json

import numpy as np
import pytest

from automem_dagster.training.gguf_lora import (
    AdapterExportError,
    export_gguf_lora,
    gguf_header,
    permute_rows,
    unpermute_rows,
)

# A tiny llama: hidden 16, 4 query heads of 4, 2 key/value heads, 2 layers, ffn 24.
HIDDEN, N_HEAD, N_HEAD_KV, FFN, LAYERS, RANK = 16, 4, 2, 24, 2, 3
HEAD_DIM = HIDDEN // N_HEAD
OUT = {"q_proj": HIDDEN, "k_proj": N_HEAD_KV * HEAD_DIM, "v_proj": N_HEAD_KV * HEAD_DIM, "o_proj": HIDDEN,
       "gate_proj": FFN, "up_proj": FFN, "down_proj": HIDDEN}
IN = {**dict.fromkeys(OUT, HIDDEN), "down_proj": FFN}
BLOCK = {**dict.fromkeys(("q_proj", "k_proj", "v_proj", "o_proj"), "self_attn"),
         **dict.fromkeys(("gate_proj", "up_proj", "down_proj"), "mlp")}
STEM = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
        "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def _fake_base(path, arch="llama"):
    import gguf

    writer = gguf.GGUFWriter(path, arch)
    writer.add_uint32(f"{arch}.attention.head_count", N_HEAD)
    writer.add_uint32(f"{arch}.attention.head_count_kv", N_HEAD_KV)
    writer.add_uint32(f"{arch}.block_count", LAYERS)
    for i in range(LAYERS):
        for module, stem in STEM.items():
            writer.add_tensor(f"blk.{i}.{stem}.weight", np.zeros((OUT[module], IN[module]), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _fake_adapter(path, modules=tuple(OUT), extra_tensors=None, **config):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {}
    for i in range(LAYERS):
        for module in modules:
            prefix = f"base_model.model.model.layers.{i}.{BLOCK[module]}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = rng.standard_normal((RANK, IN[module])).astype(np.float32)
            tensors[f"{prefix}.lora_B.weight"] = rng.standard_normal((OUT[module], RANK)).astype(np.float32)
    tensors.update(extra_tensors or {})
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, path / "adapter_model.safetensors")
    cfg = {"peft_type": "LORA", "r": RANK, "lora_alpha": 6, "bias": "none", "use_dora": False,
           "use_rslora": False, "target_modules": list(modules), **config}
    (path / "adapter_config.json").write_text(json.dumps(cfg))
    return path, tensors


@pytest.fixture
def base(tmp_path):
    return _fake_base(tmp_path / "base.gguf")


def test_export_names_shapes_alpha_and_qk_layout(tmp_path, base):
    import gguf

    adapter, tensors = _fake_adapter(tmp_path / "adapter")
    out = export_gguf_lora(adapter, tmp_path / "out" / "adapter.gguf", base)
    reader = gguf.GGUFReader(out)
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert fields["general.architecture"] == "llama"
    assert fields["general.type"] == "adapter" and fields["adapter.type"] == "lora"
    assert fields["adapter.lora.alpha"] == 6.0
    got = {t.name: t for t in reader.tensors}
    assert len(got) == 2 * LAYERS * len(OUT)
    for i in range(LAYERS):
        for module, stem in STEM.items():
            prefix = f"base_model.model.model.layers.{i}.{BLOCK[module]}.{module}"
            a, b = got[f"blk.{i}.{stem}.weight.lora_a"], got[f"blk.{i}.{stem}.weight.lora_b"]
            # llama.cpp's check: lora_a ne=[n_in, r], lora_b ne=[r, n_out].
            assert [int(d) for d in a.shape] == [IN[module], RANK]
            assert [int(d) for d in b.shape] == [RANK, OUT[module]]
            a_data = np.asarray(a.data).reshape(RANK, IN[module])
            b_data = np.asarray(b.data).reshape(OUT[module], RANK)
            np.testing.assert_array_equal(a_data, tensors[f"{prefix}.lora_A.weight"])
            original_b = tensors[f"{prefix}.lora_B.weight"]
            if module in ("q_proj", "k_proj"):
                heads = N_HEAD if module == "q_proj" else N_HEAD_KV
                assert not np.array_equal(b_data, original_b)  # the rows really moved
                np.testing.assert_array_equal(unpermute_rows(b_data, heads), original_b)
            else:
                np.testing.assert_array_equal(b_data, original_b)
    assert not list((tmp_path / "out").glob(".*tmp"))  # the temp file was renamed, not left


def test_permutation_matches_rotary_pair_layout():
    # Head h, HF rows [x0..x3] (halves [x0,x1] [x2,x3]) become [x0,x2,x1,x3] in GGUF.
    rows = np.arange(2 * 4)[:, None]
    assert permute_rows(rows, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    w = np.random.default_rng(1).standard_normal((24, 5))
    np.testing.assert_array_equal(unpermute_rows(permute_rows(w, 3), 3), w)


def test_bf16_adapter_is_widened_exactly(tmp_path, base):
    import gguf
    import torch
    from safetensors.torch import save_file

    adapter, tensors = _fake_adapter(tmp_path / "adapter", modules=("v_proj",))
    save_file({k: torch.from_numpy(v).to(torch.bfloat16) for k, v in tensors.items()},
              adapter / "adapter_model.safetensors")
    out = export_gguf_lora(adapter, tmp_path / "a.gguf", base)
    a = next(t for t in gguf.GGUFReader(out).tensors if t.name == "blk.0.attn_v.weight.lora_a")
    expected = torch.from_numpy(tensors["base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight"])
    np.testing.assert_array_equal(np.asarray(a.data).reshape(RANK, HIDDEN), expected.to(torch.bfloat16).float().numpy())


@pytest.mark.parametrize("option, value", [
    ("use_dora", True), ("use_rslora", True), ("bias", "all"), ("modules_to_save", ["lm_head"]),
    ("alpha_pattern", {"q_proj": 32}), ("init_lora_weights", "pissa_niter_4"), ("peft_type", "IA3"),
    ("lora_alpha", 0),
])
def test_unsupported_options_are_refused_by_name(tmp_path, base, option, value):
    adapter, _ = _fake_adapter(tmp_path / "adapter", **{option: value})
    with pytest.raises(AdapterExportError, match=rf"adapter_config\.json: {option}="):
        export_gguf_lora(adapter, tmp_path / "a.gguf", base)
    assert not (tmp_path / "a.gguf").exists()


def test_unmappable_module_is_refused(tmp_path, base):
    extra = {"base_model.model.lm_head.lora_A.weight": np.zeros((RANK, HIDDEN), np.float32),
             "base_model.model.lm_head.lora_B.weight": np.zeros((50, RANK), np.float32)}
    adapter, _ = _fake_adapter(tmp_path / "adapter", extra_tensors=extra)
    with pytest.raises(AdapterExportError, match=r"adapter_model\.safetensors: tensor 'base_model\.model\.lm_head"):
        export_gguf_lora(adapter, tmp_path / "a.gguf", base)


def test_wrong_base_and_unknown_architecture_are_refused(tmp_path, base):
    adapter, _ = _fake_adapter(tmp_path / "adapter", modules=("q_proj",))
    with pytest.raises(AdapterExportError, match=r"general\.architecture='gemma3'.*knows only \['llama'\]"):
        export_gguf_lora(adapter, tmp_path / "a.gguf", _fake_base(tmp_path / "g.gguf", arch="gemma3"))
    from safetensors.numpy import save_file

    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((RANK, 32), np.float32),
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": np.zeros((32, RANK), np.float32)},
              adapter / "adapter_model.safetensors")
    with pytest.raises(AdapterExportError, match=r"blk\.0\.attn_q\.weight lora_A \(3, 32\).*another model"):
        export_gguf_lora(adapter, tmp_path / "a.gguf", base)


def test_the_header_holds_the_scalar_values_and_a_rewritten_file_is_read_again(tmp_path):
    """``gguf_header`` (shared by the export and ``describe_base``) is parsed once per file version: the
    metadata values without the arrays, every tensor's shape; a file written over is read anew."""
    path = _fake_base(tmp_path / "base.gguf")
    fields, shapes = gguf_header(path)
    assert fields["general.architecture"] == "llama" and fields["llama.attention.head_count"] == N_HEAD
    assert fields["llama.block_count"] == LAYERS and not any(isinstance(v, list) for v in fields.values())
    assert shapes["blk.0.ffn_down.weight"] == (FFN, HIDDEN)
    assert gguf_header(path) is gguf_header(path)
    path.unlink()
    _fake_base(path, arch="gemma3")
    assert gguf_header(path)[0]["general.architecture"] == "gemma3"


def test_missing_or_corrupt_adapter_is_refused(tmp_path, base):
    with pytest.raises(AdapterExportError, match="does not exist"):
        export_gguf_lora(tmp_path / "nowhere", tmp_path / "a.gguf", base)
    adapter, _ = _fake_adapter(tmp_path / "adapter")
    (adapter / "adapter_model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(AdapterExportError, match=r"adapter_model\.safetensors is not a valid safetensors file"):
        export_gguf_lora(adapter, tmp_path / "a.gguf", base)
    (adapter / "adapter_model.safetensors").unlink()
    with pytest.raises(AdapterExportError, match=r"adapter_model\.safetensors is missing"):
        export_gguf_lora(adapter, tmp_path / "a.gguf", base)
    (adapter / "adapter_config.json").write_text("{truncated")
    with pytest.raises(AdapterExportError, match=r"adapter_config\.json is not readable JSON"):
        export_gguf_lora(adapter, tmp_path / "a.gguf", base)
    (adapter / "adapter_config.json").unlink()
    with pytest.raises(AdapterExportError, match=r"adapter_config\.json is missing"):
        export_gguf_lora(adapter, tmp_path / "a.gguf", base)
    corrupt_base = tmp_path / "corrupt.gguf"
    corrupt_base.write_bytes(b"GGUF" + b"\xff" * 20)
    adapter, _ = _fake_adapter(tmp_path / "adapter2")
    with pytest.raises(AdapterExportError, match="base GGUF .*corrupt.gguf cannot be read"):
        export_gguf_lora(adapter, tmp_path / "a.gguf", corrupt_base)
