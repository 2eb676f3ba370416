"""LoRA SFT: dataset checks, the held-out split, run identity, completion-only labels, and real
runs on the embedded base (validation loss falls, the adapter loads back, a killed run resumes)."""

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from functools import lru_cache
from pathlib import Path

import pandas as pd
import pytest

from automem_dagster.training.checkpoints import resume_point, run_fingerprint
from automem_dagster.training.examples import load_examples, split_examples
from automem_dagster.training.launch import launch_training
from automem_dagster.training.metering import eta_seconds, meter_callback, validation_passes_left
from automem_dagster.training.settings import LoraSettings
from automem_dagster.training.sft import build_trainer, train_adapter
from automem_dagster.training.sft_result import RUN_FILE, TrainingError

ROOT = Path(__file__).resolve().parents[1]
OBJECTS = ("tree", "water", "stone", "cow", "zombie", "coal", "table", "iron")
DIRECTIONS = ("north", "south", "east", "west")
# Small and fast: rank 8 on the attention projections, the largest learning rate the bounds allow.
TINY = LoraSettings(rank=8, alpha=16, dropout=0.0, learning_rate=1e-3, epochs=1, batch_size=4,
                    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], max_length=256, warmup_ratio=0.0,
                    lr_scheduler="constant")
TARGET_STEPS = 8


def _rows(episodes=4, per_episode=4):
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


def _dataset(path, rows=None):
    path.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(_rows() if rows is None else rows).to_parquet(path / "dataset.parquet")
    return path


# --- the dataset ---------------------------------------------------------------------------------

def test_good_dataset_loads(tmp_path):
    rows = load_examples(_dataset(tmp_path / "d"))
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
    (lambda rows: [{**r, "prompt": [{"role": "tool", "content": "x"}, *r["prompt"]]} for r in rows], "outside"),
    (lambda rows: [{**r, "phase": "act"} for r in rows], "`phase` is 'act'"),
    (lambda rows: [{**r, "completion": [{"role": "assistant", "content": "  "}]} for r in rows], "completion is empty"),
])
def test_malformed_dataset_names_file_and_problem(tmp_path, change, message):
    rows = change(_rows())
    path = tmp_path / "d"
    path.mkdir()
    if rows:
        pd.DataFrame(rows).to_parquet(path / "dataset.parquet")
    else:  # an empty table that still has the columns
        pd.DataFrame(_rows()).iloc[:0].to_parquet(path / "dataset.parquet")
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
    data, out = _dataset(tmp_path / "d"), tmp_path / "run"
    identity = run_fingerprint(TINY, data, base="embedded", max_steps=8, validation_fraction=0.1, seed=0)
    out.mkdir()
    (out / RUN_FILE).write_text(json.dumps(identity))
    _fake_checkpoint(out, 2)
    assert resume_point(out, identity) == out / "checkpoints" / "checkpoint-2"

    changed = TINY.model_copy(update={"rank": 16, "alpha": 32})
    with pytest.raises(TrainingError, match=r"another run: settings changed.*new output directory.*delete") as err:
        train_adapter(data, changed, out, max_steps=8)  # refused before any model is loaded
    assert str(out / "checkpoints") in str(err.value)
    _dataset(data, _rows(per_episode=5))
    with pytest.raises(TrainingError, match="dataset_sha256 changed"):
        train_adapter(data, TINY, out, max_steps=8)
    with pytest.raises(TrainingError, match="max_steps changed"):
        resume_point(out, run_fingerprint(TINY, data, base="embedded", max_steps=9, validation_fraction=0.1, seed=0)
                     | {"fingerprint": "other"})
    (out / RUN_FILE).unlink()
    with pytest.raises(TrainingError, match="nothing says which run"):
        resume_point(out, identity)


def test_cut_off_checkpoints_are_dropped(tmp_path):
    data, out = _dataset(tmp_path / "d"), tmp_path / "run"
    identity = run_fingerprint(TINY, data, base="embedded", max_steps=8, validation_fraction=0.1, seed=0)
    _fake_checkpoint(out, 4, complete=False)  # killed while writing: no trainer state
    assert resume_point(out, identity) is None and not (out / "checkpoints" / "checkpoint-4").exists()
    out.mkdir(exist_ok=True)
    (out / RUN_FILE).write_text(json.dumps(identity))
    _fake_checkpoint(out, 2)
    _fake_checkpoint(out, 4, complete=False)
    assert resume_point(out, identity).name == "checkpoint-2"
    assert not (out / "checkpoints" / "checkpoint-4").exists()


# --- completion-only loss ------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _tokenizer():
    from transformers import AutoTokenizer

    from automem_dagster.llm.embedded_server import embedded_model_path

    path = embedded_model_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tok.pad_token = tok.pad_token or tok.eos_token
    return tok


def test_prompt_tokens_are_masked_in_the_collated_batch(tmp_path):
    """The trainer's own dataset preparation and collator, on a tiny random model with the real
    tokenizer: every prompt token has label -100, the completion (with the end of turn) is kept."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    rows = _rows(episodes=1, per_episode=4)
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


# --- real runs on the embedded base --------------------------------------------------------------

@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory):
    """A run started by the command line, killed (SIGKILL) once checkpoint-2 is complete, then finished
    in this process with the same output directory. Torch runs on one thread here: on a 2-core machine
    shared with other test processes, two OpenMP threads that keep being descheduled are many times
    slower than one."""
    import torch

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOMEM_TORCH_THREADS", "1")
        try:
            return _interrupted_run(tmp_path_factory.mktemp("sft"))
        finally:
            torch.set_num_threads(threads)


def _interrupted_run(tmp):
    data, out = _dataset(tmp / "dataset"), tmp / "run"
    (tmp / "settings.json").write_text(TINY.model_dump_json())
    log = tmp / "first.log"
    started = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "automem_dagster.training.sft", "--dataset", str(data), "--settings",
             str(tmp / "settings.json"), "--out", str(out), "--max-steps", str(TARGET_STEPS), "--save-every", "2",
             "--eval-every", "4"], cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ})
        state = out / "checkpoints" / "checkpoint-2" / "trainer_state.json"
        try:
            while not state.exists():
                assert proc.poll() is None, f"the training process ended before checkpoint-2:\n{log.read_text()[-3000:]}"
                assert time.monotonic() - started < 400, f"no checkpoint-2 after 400 s:\n{log.read_text()[-3000:]}"
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    killed = {"returncode": proc.returncode, "finished": (out / "training.json").exists(), "log": log.read_text()}
    progress, relayed = [], []
    # Finished the way the loops train: in a process of its own, its progress streamed back here.
    result = launch_training(data, TINY, out, base="embedded", max_steps=TARGET_STEPS, save_every=2, eval_every=4,
                             progress=lambda step, total, logs: progress.append((step, total, dict(logs))),
                             text=relayed.append)
    killed["relayed"] = relayed
    return result, killed, progress, out


@pytest.mark.integration
def test_killed_run_resumes_from_its_last_checkpoint(interrupted_run):
    result, killed, progress, out = interrupted_run
    assert killed["returncode"] == -signal.SIGKILL and not killed["finished"]
    assert "step 1/8  loss" in killed["log"] and "validation loss" in killed["log"]  # progress lines
    # One name per timing, the same on the console, in the relayed progress and in the result.
    assert "train_s_per_step " in killed["log"] and "validation_s_per_pass " in killed["log"]
    assert all("train_s_per_step" in p[2] for p in progress if "loss" in p[2])
    assert all("validation_s_per_pass" in p[2] for p in progress if "eval_loss" in p[2])
    # The libraries' bars (the GGUF base dequantized, its weights loaded) stay in the trainer: the
    # launcher's console gets the trainer's own lines only.
    assert any("resuming from" in line for line in killed["relayed"])
    assert not [line for line in killed["relayed"] if "GGUF tensors" in line or "Loading weights" in line]
    assert result.resumed_from is not None
    resumed = int(Path(result.resumed_from).name.split("-")[1])
    assert resumed >= 2 and resumed % 2 == 0 and Path(result.resumed_from).parent == out / "checkpoints"
    assert result.global_step == result.max_steps == TARGET_STEPS
    assert result.steps_this_run == TARGET_STEPS - resumed
    # The curves hold the steps before the kill (from the checkpoint) and after, each once.
    assert [s for s, _ in result.train_loss] == list(range(1, TARGET_STEPS + 1))
    assert [s for s, _ in result.validation_loss] == [0, 4, 8]
    assert [p[0] for p in progress if "loss" in p[2]] == list(range(resumed + 1, TARGET_STEPS + 1))
    assert all(total == TARGET_STEPS for _, total, _ in progress)
    saved = json.loads((out / "training.json").read_text())
    assert saved["resumed_from"] == result.resumed_from and saved["global_step"] == TARGET_STEPS
    assert len(list((out / "checkpoints").glob("checkpoint-*"))) <= 3
    assert not list(out.glob(".adapter.*"))  # the temp directory was renamed into place


@pytest.mark.integration
def test_validation_loss_falls_and_the_adapter_loads_back(interrupted_run):
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    from automem_dagster.training.base_model import load_base

    result, _, _, out = interrupted_run
    assert result.split_by == "episode" and (result.examples_train, result.examples_validation) == (12, 4)
    assert result.examples_too_long == 0
    assert result.final_validation_loss < result.initial_validation_loss - 0.5, result.validation_loss
    assert result.train_loss[-1][1] < result.train_loss[0][1]
    assert result.train_s_per_step > 0 and result.tokens_per_second > 0 and result.tokens_trained > 0
    # This process validated at steps 4 (or not, if the kill came after it) and 8; all its time is
    # steps, validation passes and checkpoint writes.
    assert result.validation_passes >= 1 and result.validation_s_per_pass > 0
    # The median step after the first is at most the time of half of those steps, so the whole training
    # took at least that many medians (a median times every step need not fit: steps vary under load).
    assert result.wall_s >= result.train_s_per_step * math.ceil((result.steps_this_run - 1) / 2)
    assert 0 < result.peak_rss_mb < 4096
    # The adapter loads back with peft onto the base, holds the trained weights, and lowers the loss
    # of a validation example against the base alone.
    base, tok = load_base()
    model = PeftModel.from_pretrained(base, result.adapter_dir).eval()
    saved = load_file(Path(result.adapter_dir) / "adapter_model.safetensors")
    loaded = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    assert len(saved) == len(loaded) == 4 * 2 * base.config.num_hidden_layers
    for key, tensor in saved.items():
        assert torch.equal(loaded[key.replace(".weight", ".default.weight")], tensor)
    rows = _rows()
    row = rows[split_examples([r["episode"] for r in rows], 0.1, 0).validation[0]]  # held out from training
    prompt = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=False)
    full = tok.apply_chat_template(row["prompt"] + row["completion"], return_dict=False)
    ids = torch.tensor([full])
    labels = ids.clone()
    labels[0, :len(prompt)] = -100
    with torch.no_grad():
        tuned = model(input_ids=ids, labels=labels).loss.item()
        with model.disable_adapter():
            plain = model(input_ids=ids, labels=labels).loss.item()
    assert tuned < plain - 0.5, (tuned, plain)


@pytest.mark.integration
def test_the_adapter_is_an_mlflow_model_that_loads_back_from_the_registry(interrupted_run, tmp_path, monkeypatch):
    """The trained adapter logged with its training run: the registered version's source is an MLflow
    logged model with an ``MLmodel``, and ``mlflow.pyfunc.load_model`` on the registry's URI gives a
    specialist that answers a held-out memory turn with the operation it was trained on."""
    import mlflow

    from automem_dagster.tracking.mlflow_tracking import Tracker
    from automem_dagster.tracking.runs import TrainingRun, specialist_model_name

    result, _, _, _ = interrupted_run
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, artifact_root=tmp_path / "artifacts")
    run = tracker.log_training(TrainingRun(
        game="crafter", family="crafter", scaffold_version=0, adapter="a1", base=result.base,
        settings=result.settings, settings_source="default", dataset_hash="test", examples_train=result.examples_train,
        examples_validation=result.examples_validation, train_loss=result.train_loss,
        validation_loss=result.validation_loss, figures={"train_s_per_step": result.train_s_per_step},
        adapter_dir=Path(result.adapter_dir)))
    client, name = tracker.client, specialist_model_name("crafter")
    [version] = client.search_model_versions(f"name='{name}'")
    model = client.get_logged_model(version.source.removeprefix("models:/"))
    assert version.run_id == model.source_run_id == run.run_id and model.status == "READY"
    assert [o.model_id for o in client.get_run(run.run_id).outputs.model_outputs] == [model.model_id]
    files = {f.path for f in client.list_logged_model_artifacts(model.model_id)}
    assert {"MLmodel", "specialist_model_code.py", "requirements.txt"} <= files

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # how a user loads it: mlflow's registry URI
    specialist = mlflow.pyfunc.load_model(f"models:/{name}/{version.version}")
    rows = _rows()
    row = rows[split_examples([r["episode"] for r in rows], 0.1, 0).validation[0]]  # held out from training
    [reply] = specialist.predict([row["prompt"]])
    # A memory turn in the trained form (operations, then DONE), where the base alone answers in prose.
    assert reply.strip().startswith("<|") and reply.strip().endswith("<|DONE|>"), reply
    with pytest.raises(Exception, match="does not end with a user message"):
        specialist.predict([row["prompt"] + row["completion"]])
