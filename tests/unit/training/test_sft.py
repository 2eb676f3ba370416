"""LoRA SFT without a real run: dataset checks, the held-out split, run identity and resuming,
completion-only labels and the trainer's timings."""

import json
import random
import time
import warnings

import pandas as pd
import pytest
from sft_examples import TINY, decision_rows, embedded_tokenizer, write_dataset

from automem_dagster.training.checkpoints import resume_point, run_fingerprint
from automem_dagster.training.examples import load_examples, split_examples
from automem_dagster.training.metering import eta_seconds, meter_callback, validation_passes_left
from automem_dagster.training.sft import build_trainer, train_adapter
from automem_dagster.training.sft_result import RUN_FILE, TrainingError

# --- the dataset ---------------------------------------------------------------------------------

def test_good_dataset_loads(tmp_path):
    rows = load_examples(write_dataset(tmp_path / "d"))
    assert len(rows) == 16 and rows[0]["completion"][0]["role"] == "assistant"


@pytest.mark.parametrize("change, message", [
    (lambda rows: [{k: v for k, v in r.items() if k not in ("episode", "score")} for r in rows],
     r"lacks the columns \['episode', 'score'\]"),
    (lambda rows: rows[:1], "holds 1 example"),
    (lambda rows: rows[:0], "holds 0 example"),
    (lambda rows: [{**r, "completion": [{"role": "user", "content": "x"}]} for r in rows],
     r"completion roles \['user'\]: expected exactly \['assistant'\]"),
    (lambda rows: [{**r, "completion": r["completion"] * 2} for r in rows], "expected exactly"),
    (lambda rows: [{**r, "prompt": r["prompt"] + r["completion"]} for r in rows], "must end with a user message"),
    (lambda rows: [{**r, "prompt": [{"role": "tool", "content": "x"}, *r["prompt"]]} for r in rows],
     r"`prompt.0.role`: Input should be .system., .user. or .assistant. \(got .tool.\)"),
    (lambda rows: [{**r, "phase": "act"} for r in rows], r"`phase`: Input should be 'log' or 'plan' \(got 'act'\)"),
    (lambda rows: [{**r, "completion": [{"role": "assistant", "content": "  "}]} for r in rows], "completion is empty"),
])
def test_malformed_dataset_names_file_and_problem(tmp_path, change, message):
    rows = change(decision_rows())
    path = tmp_path / "d"
    path.mkdir()
    if rows:
        pd.DataFrame(rows).to_parquet(path / "dataset.parquet")
    else:  # an empty table that still has the columns
        pd.DataFrame(decision_rows()).iloc[:0].to_parquet(path / "dataset.parquet")
    with pytest.raises(TrainingError, match=message) as err:
        load_examples(path)
    assert str(path / "dataset.parquet") in str(err.value) and "curation" in str(err.value)


def test_missing_or_unreadable_dataset(tmp_path):
    with pytest.raises(TrainingError, match="does not exist"):
        load_examples(tmp_path)
    (tmp_path / "dataset.parquet").write_text("not parquet")
    with pytest.raises(TrainingError, match="not a readable parquet file"):
        load_examples(tmp_path)


# --- the split -----------------------------------------------------------------------------------

def test_split_never_puts_an_episode_on_both_sides():
    rng = random.Random(0)
    for _ in range(300):
        n_episodes = rng.randint(2, 12)
        episodes = [f"ep{rng.randrange(n_episodes)}" for _ in range(rng.randint(2, 80))]
        if len(set(episodes)) < 2:
            continue
        fraction, seed = rng.choice((0.05, 0.1, 0.3, 0.5, 0.9)), rng.randrange(3)
        split = split_examples(episodes, fraction, seed)
        train, val = {episodes[i] for i in split.train}, {episodes[i] for i in split.validation}
        assert split.by == "episode" and not train & val and train and val
        assert sorted(split.train + split.validation) == list(range(len(episodes)))
        assert (split.episodes_train, split.episodes_validation) == (len(train), len(val))
        # Deterministic, and independent of the order of the rows.
        assert split_examples(episodes, fraction, seed) == split
        order = list(range(len(episodes)))
        rng.shuffle(order)
        shuffled = split_examples([episodes[i] for i in order], fraction, seed)
        assert {episodes[order[i]] for i in shuffled.validation} == val


def test_split_reaches_the_fraction_and_one_episode_splits_by_example():
    episodes = [f"ep{i // 10}" for i in range(100)]  # 10 episodes of 10 rows
    split = split_examples(episodes, 0.2, 0)
    assert len(split.validation) == 20 and split.episodes_validation == 2
    single = split_examples(["only"] * 5, 0.1, 0)
    assert single.by == "example" and len(single.validation) == 1 and len(single.train) == 4
    assert len(split_examples(["a", "b"], 0.9, 0).train) == 1  # one episode always stays for training
    with pytest.raises(TrainingError, match="at least 2"):
        split_examples(["a"], 0.1, 0)
    with pytest.raises(TrainingError, match="between 0 and 1"):
        split_examples(episodes, 0.0, 0)


# --- run identity and resuming -------------------------------------------------------------------

def _fake_checkpoint(out, step, complete=True):
    ckpt = out / "checkpoints" / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    if complete:
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return ckpt


def test_changed_settings_or_dataset_refuse_to_resume(tmp_path):
    data, out = write_dataset(tmp_path / "d"), tmp_path / "run"
    identity = run_fingerprint(TINY, data, base="embedded", max_steps=8, validation_fraction=0.1, seed=0)
    out.mkdir()
    (out / RUN_FILE).write_text(json.dumps(identity))
    _fake_checkpoint(out, 2)
    assert resume_point(out, identity) == out / "checkpoints" / "checkpoint-2"

    changed = TINY.model_copy(update={"rank": 16, "alpha": 32})
    with pytest.raises(TrainingError, match=r"another run: settings changed.*new output directory.*delete") as err:
        train_adapter(data, changed, out, max_steps=8)  # refused before any model is loaded
    assert str(out / "checkpoints") in str(err.value)
    write_dataset(data, decision_rows(per_episode=5))
    with pytest.raises(TrainingError, match="dataset_sha256 changed"):
        train_adapter(data, TINY, out, max_steps=8)
    with pytest.raises(TrainingError, match="max_steps changed"):
        resume_point(out, run_fingerprint(TINY, data, base="embedded", max_steps=9, validation_fraction=0.1, seed=0)
                     | {"fingerprint": "other"})
    (out / RUN_FILE).unlink()
    with pytest.raises(TrainingError, match="nothing says which run"):
        resume_point(out, identity)


def test_cut_off_checkpoints_are_dropped(tmp_path):
    data, out = write_dataset(tmp_path / "d"), tmp_path / "run"
    identity = run_fingerprint(TINY, data, base="embedded", max_steps=8, validation_fraction=0.1, seed=0)
    _fake_checkpoint(out, 4, complete=False)  # killed while writing: no trainer state
    assert resume_point(out, identity) is None and not (out / "checkpoints" / "checkpoint-4").exists()
    out.mkdir(exist_ok=True)
    (out / RUN_FILE).write_text(json.dumps(identity))
    _fake_checkpoint(out, 2)
    _fake_checkpoint(out, 4, complete=False)
    assert resume_point(out, identity).name == "checkpoint-2"
    assert not (out / "checkpoints" / "checkpoint-4").exists()


def test_prompt_tokens_are_masked_in_the_collated_batch(tmp_path):
    """The trainer's own dataset preparation and collator, on a tiny random model with the real
    tokenizer: every prompt token has label -100, the completion (with the end of turn) is kept."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = embedded_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    rows = decision_rows(episodes=1, per_episode=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = build_trainer(model, tok, rows, rows[:1], TINY, tmp_path / "checkpoints", max_steps=1, micro_batch=4)
    # peft reads transformers' deprecated is_gradient_checkpointing alias: library noise, kept off the console
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]
    assert trainer.args.completion_only_loss is True and trainer.args.assistant_only_loss is False
    batch = next(iter(trainer.get_train_dataloader()))
    by_text = {r["completion"][0]["content"]: r for r in rows}
    assert batch["input_ids"].shape[0] == 4
    for ids, labels, mask in zip(batch["input_ids"], batch["labels"], batch["attention_mask"], strict=True):
        kept = labels != -100
        completion = tok.decode(ids[kept])
        assert completion.endswith("<|im_end|>\n")
        row = by_text[completion.removesuffix("<|im_end|>\n")]
        prompt = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        first = int(kept.nonzero()[0])
        assert tok.decode(ids[:first]) == prompt and not kept[:first].any()  # the whole prompt is masked
        assert (labels[kept] == ids[kept]).all() and not kept[mask == 0].any()  # padding is masked too


# --- timings --------------------------------------------------------------------------------------

def test_validation_passes_left_follow_the_trainer_schedule():
    # Counted when a step has been logged, before its own pass: every 4 of 8 steps, passes at 4 and 8;
    # every 3 of 8, at 3, 6 and after the last step.
    assert [validation_passes_left(s, 8, 4) for s in (1, 3, 4, 5, 8)] == [2, 2, 2, 1, 1]
    assert [validation_passes_left(s, 8, 3) for s in (1, 3, 4, 6, 7, 8)] == [3, 3, 2, 2, 1, 1]


def test_meter_names_each_timing_once_on_the_console_and_in_the_progress():
    """The callback driven through the trainer's own state: steps and a validation pass timed apart,
    the console line and the relayed logs carry the same names, the ETA counts both."""
    import io

    from transformers import TrainerControl, TrainerState, TrainingArguments

    args = TrainingArguments(output_dir="unused", report_to="none")
    state, control = TrainerState(max_steps=4, eval_steps=2), TrainerControl()
    stream, relayed = io.StringIO(), []
    meter = meter_callback(lambda step, total, logs: relayed.append((step, dict(logs))), stream)
    meter.on_train_begin(args, state, control)
    meter.on_log(args, state, control, logs={"eval_loss": 2.0, "eval_runtime": 30.0})
    for step in (1, 2):
        meter.on_step_begin(args, state, control)
        time.sleep(0.02)
        state.global_step = step
        meter.on_step_end(args, state, control)
    meter.on_log(args, state, control, logs={"loss": 1.5, "learning_rate": 1e-3})
    figures = meter.figures()
    assert 0.02 <= figures["train_s_per_step"] < 1 and figures["validation_s_per_pass"] == 30.0
    assert relayed[0] == (0, {"eval_loss": 2.0, "eval_runtime": 30.0, "validation_s_per_pass": 30.0})
    assert relayed[1][1]["train_s_per_step"] == figures["train_s_per_step"]
    lines = stream.getvalue().splitlines()
    assert lines[0] == "step 0/4  validation loss 2.0000  validation_s_per_pass 30.00"
    assert lines[1].startswith("step 2/4  loss 1.5000  lr 1.00e-03  train_s_per_step 0.0")
    # 2 steps left and the passes at steps 2 (logged before it runs) and 4: a minute, not 2 x 0.02 s
    assert lines[1].endswith("eta 1:00") or lines[1].endswith("eta 1:01")
    assert 60 <= eta_seconds(figures, 2, 4, 2) < 62
