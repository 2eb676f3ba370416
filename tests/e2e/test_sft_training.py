"""LoRA SFT runs on the embedded base: a run killed mid-way resumes from its last checkpoint, the
validation loss falls, the adapter loads back with peft and from MLflow's registry. The suite's one
kill-and-resume of training: one module-scoped run, read by its three tests."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sft_examples import TINY, decision_rows, write_dataset

from automem_dagster.training.examples import split_examples
from automem_dagster.training.launch import launch_training

ROOT = Path(__file__).resolve().parents[2]
TARGET_STEPS = 8


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
    data, out = write_dataset(tmp / "dataset"), tmp / "run"
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
    rows = decision_rows()
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
    rows = decision_rows()
    row = rows[split_examples([r["episode"] for r in rows], 0.1, 0).validation[0]]  # held out from training
    [reply] = specialist.predict([row["prompt"]])
    # A memory turn in the trained form (operations, then DONE), where the base alone answers in prose.
    assert reply.strip().startswith("<|") and reply.strip().endswith("<|DONE|>"), reply
    with pytest.raises(Exception, match="does not end with a user message"):
        specialist.predict([row["prompt"] + row["completion"]])
