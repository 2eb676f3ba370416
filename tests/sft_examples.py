"""A small memory-decision dataset for the LoRA SFT tests, built from one fixed pattern (the completion
restates the observation as an UPSERT) so a few steps of LoRA learn it; the small, fast settings they
train with; and the embedded base's tokenizer."""

from functools import lru_cache

import pandas as pd

from automem_dagster.training.settings import LoraSettings

OBJECTS = ("tree", "water", "stone", "cow", "zombie", "coal", "table", "iron")
DIRECTIONS = ("north", "south", "east", "west")
# Small and fast: rank 8 on the attention projections, the largest learning rate the bounds allow.
TINY = LoraSettings(rank=8, alpha=16, dropout=0.0, learning_rate=1e-3, epochs=1, batch_size=4,
                    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], max_length=256, warmup_ratio=0.0,
                    lr_scheduler="constant")


def decision_rows(episodes=4, per_episode=4):
    """Memory decisions built from one fixed pattern (the completion restates the observation as an
    UPSERT), so a few steps of LoRA learn it."""
    rows, k = [], 0
    for e in range(episodes):
        for s in range(per_episode):
            obj, dist, way = OBJECTS[k % len(OBJECTS)], 1 + (3 * k) % 5, DIRECTIONS[(7 * k) % 4]
            k += 1
            rows.append({
                "prompt": [{"role": "system", "content": "You keep the memory of a game agent. Record what you see "
                                                         "with memory operations, then <|DONE|>."},
                           {"role": "user", "content": f"Step {s}. You see a {obj} {dist} steps to your {way}.\n\n"
                                                       "Phase: LOG."}],
                "completion": [{"role": "assistant", "content": f"<|UPSERT|>map_notes.txt|{obj}|{dist} steps {way}\n"
                                                                "<|DONE|>"}],
                "episode": f"crafter__seed{e}", "seed": e, "step": s, "phase": "log", "turn": 0, "score": 1.0})
    return rows


def write_dataset(path, rows=None):
    path.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(decision_rows() if rows is None else rows).to_parquet(path / "dataset.parquet")
    return path


# --- completion-only loss ------------------------------------------------------------------------

@lru_cache(maxsize=1)
def embedded_tokenizer():
    from transformers import AutoTokenizer

    from automem_dagster.llm.embedded_server import embedded_model_path

    path = embedded_model_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tok.pad_token = tok.pad_token or tok.eos_token
    return tok
