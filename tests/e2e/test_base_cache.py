"""The embedded training base read from its cache is the GGUF's conversion itself: the same fp32 weights,
the same tokenizer and the same name (adapters record it as their base). The cache is the user's own
(``base_cache_root``), shared with every training of the run, so this test converts at most once."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from automem_dagster.llm.embedded_server import embedded_model_path
from automem_dagster.training.base_model import embedded_base_folder, load_base


@pytest.mark.e2e
def test_the_cached_base_is_the_ggufs_conversion():
    folder = embedded_base_folder()
    assert embedded_base_folder() == folder and (folder / "config.json").exists()
    model, tokenizer = load_base()
    gguf = embedded_model_path()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    ours, theirs = model.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert model.name_or_path == model.config._name_or_path == str(gguf.parent)
    assert not hasattr(model.config, "quantization_config") and getattr(model, "hf_quantizer", None) is None
    reference_tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    chat = [{"role": "user", "content": "Note: tree at (3, 4) <|ACTION|>do<|END|> ✓"}]
    assert tokenizer.apply_chat_template(chat, tokenize=True) == reference_tokenizer.apply_chat_template(chat, tokenize=True)
    assert tokenizer.eos_token == reference_tokenizer.eos_token
