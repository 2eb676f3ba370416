"""LoRA SFT of the memory specialist: trl's ``SFTTrainer`` with a peft LoRA on the base.

Input is a curated dataset directory holding ``dataset.parquet``: one memory decision per row in
trl's conversational prompt-completion format (``prompt``: the chat messages the specialist was
shown, ``completion``: its one assistant reply) plus the row's provenance (``episode``, ``seed``,
``step``, ``phase``, ``turn``, ``score``). The loss is taken on the completion only
(``SFTConfig(completion_only_loss=True)``: trl masks every prompt token's label with -100).

What a run guarantees:

- A held-out validation set, split deterministically by episode whenever the dataset has two or
  more episodes (no episode on both sides: consecutive steps of one episode are near-duplicates,
  so an example split would flatter the validation loss), else by example. The validation loss is
  measured before the first step, every ``eval_every`` steps and at the end; the train loss is
  logged every step.
- Checkpoints every ``save_every`` steps under ``out_dir/checkpoints`` (the last three kept). A
  rerun with the same ``out_dir`` resumes from the newest complete checkpoint. ``out_dir/run.json``
  holds a fingerprint of everything that shapes the run (settings, dataset bytes, base, step
  budget, split); a rerun whose fingerprint differs refuses to resume instead of mixing two runs.
- The adapter is written with ``save_pretrained`` to ``out_dir/adapter`` through a temp directory
  and a rename, and the result (``TrainingResult``) to ``out_dir/training.json``, atomically.
- Progress: one line per logged step on stderr (step, loss, seconds per step, ETA), and the
  caller's ``progress(step, total, logs)`` when given.
- No Hub access while training and no reporting integrations: the caller logs the result.
- Bounded memory (``build_trainer``): activation checkpointing, one unpadded sequence per micro-batch
  on CPU, narrower LM-head tiles on CPU. The embedded base measured 1.4-1.7 GB peak RSS on
  ~400-token examples and 3.1 GB on 1,900-token ones (max_length 2048), model loading included.

Command line (the resume test kills this process)::

    python -m automem_dagster.training.sft --dataset DIR --settings settings.json --out DIR [--max-steps N]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import math
import os
import re
import resource
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from automem_dagster.atomic import write_json_atomic
from automem_dagster.training.base_model import EMBEDDED_BASE, BaseModelError, configure_torch_threads, load_base
from automem_dagster.training.settings import LoraSettings

DATASET_FILE = "dataset.parquet"
REQUIRED_COLUMNS = ("prompt", "completion", "episode", "seed", "step", "phase", "turn", "score")
PHASES = ("log", "plan")
PROMPT_ROLES = ("system", "user", "assistant")
CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"
RUN_FILE = "run.json"
RESULT_FILE = "training.json"
KEEP_CHECKPOINTS = 3
EVALUATIONS_PER_RUN = 4
"""Without ``eval_every``/``save_every`` a run evaluates and checkpoints about this many times."""

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_TRAINER_STATE = "trainer_state.json"

Progress = Callable[[int, int, dict[str, float]], None]


class TrainingError(RuntimeError):
    """The dataset, the output directory or the run cannot be used; the message says what to do."""


@dataclass
class TrainingResult:
    """What one training run produced and measured; ``training.json`` holds ``to_dict()``."""

    base: str
    dataset: str
    out_dir: str
    adapter_dir: str
    settings: dict[str, Any]
    fingerprint: str
    seed: int
    validation_fraction: float
    split_by: str  # "episode" or "example"
    examples_train: int
    examples_validation: int
    episodes_train: int
    episodes_validation: int
    examples_too_long: int  # dropped by trl: the completion starts beyond max_length
    max_steps: int
    global_step: int
    epochs: float
    eval_every: int
    save_every: int
    train_loss: list[list[float]] = field(default_factory=list)  # [step, loss]
    validation_loss: list[list[float]] = field(default_factory=list)  # [step, loss]
    initial_validation_loss: float | None = None
    final_validation_loss: float | None = None
    steps_this_run: int = 0
    seconds_per_step: float | None = None  # optimizer steps of this process, evaluation and saving excluded
    tokens_per_second: float | None = None  # non-padding tokens of this process's steps over their time
    tokens_trained: int = 0  # non-padding tokens over every step of the run, resumed ones included
    train_seconds: float = 0.0  # wall time of this process's trainer.train(), evaluation and saving included
    peak_rss_mb: float = 0.0
    resumed_from: str | None = None
    device: str = "cpu"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- the dataset ---------------------------------------------------------------------------------

def load_examples(dataset_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``dataset_dir/dataset.parquet``, checked; ``TrainingError`` names the file and the problem."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(dataset_dir) / DATASET_FILE
    redo = "rebuild it with the curation step (one row per memory decision)"
    if not path.is_file():
        raise TrainingError(f"{path} does not exist: give the directory the curation step wrote its dataset to")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise TrainingError(f"{path} is not a readable parquet file ({exc}); {redo}") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise TrainingError(f"{path} lacks the columns {missing} (it has {table.column_names}); {redo}")
    rows = table.select(list(REQUIRED_COLUMNS)).to_pylist()
    if len(rows) < 2:
        raise TrainingError(f"{path} holds {len(rows)} example(s): training needs at least 2 (one to train on, "
                            f"one to validate on), and a useful run hundreds; collect more episodes and {redo}")
    problems = []
    for i, row in enumerate(rows):
        problem = _row_problem(row)
        if problem:
            problems.append(f"row {i} (episode {row.get('episode')!r}, step {row.get('step')}): {problem}")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise TrainingError(f"{path} has {len(problems)} malformed row(s): {shown}. Each row needs `prompt`: chat "
                            "messages (system/user/assistant, ending with a user message) and `completion`: exactly "
                            f"one assistant message; {redo}")
    return rows


def _row_problem(row: dict[str, Any]) -> str | None:
    for key, kind in (("episode", str), ("seed", int), ("step", int), ("turn", int)):
        if not isinstance(row[key], kind):
            return f"`{key}` is {row[key]!r}, expected {kind.__name__}"
    if not isinstance(row["score"], int | float):
        return f"`score` is {row['score']!r}, expected a number"
    if row["phase"] not in PHASES:
        return f"`phase` is {row['phase']!r}, expected one of {list(PHASES)}"
    prompt, completion = row["prompt"], row["completion"]
    for name, messages in (("prompt", prompt), ("completion", completion)):
        if not isinstance(messages, list) or not messages:
            return f"`{name}` is not a non-empty list of messages"
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                return f"`{name}` holds {m!r}, not a {{'role', 'content'}} message"
    roles = [m["role"] for m in prompt]
    if any(r not in PROMPT_ROLES for r in roles):
        return f"prompt roles {roles} include one outside {list(PROMPT_ROLES)}"
    if "system" in roles[1:]:
        return f"prompt roles {roles}: a system message may only come first"
    if roles[-1] != "user":
        return f"prompt roles {roles}: the prompt must end with a user message (the completion answers it)"
    if [m["role"] for m in completion] != ["assistant"]:
        return f"completion roles {[m['role'] for m in completion]}: expected exactly ['assistant']"
    if not completion[0]["content"].strip():
        return "the completion is empty"
    return None


@dataclass(frozen=True)
class Split:
    train: list[int]
    validation: list[int]
    by: str  # "episode" or "example"
    episodes_train: int
    episodes_validation: int


def split_examples(episodes: list[str], validation_fraction: float, seed: int = 0) -> Split:
    """Row indices for training and validation, the same for the same episodes, fraction and seed.

    With two or more episodes whole episodes are held out, in an order fixed by a hash of the seed
    and the episode name (so the row order of the file does not matter), until the held-out rows
    reach ``validation_fraction`` of the dataset; at least one episode stays on each side. With a
    single episode, single rows are held out the same way. Either side has at least one row.
    """
    n = len(episodes)
    if not 0 < validation_fraction < 1:
        raise TrainingError(f"validation_fraction={validation_fraction}: give a fraction between 0 and 1 (e.g. 0.1)")
    if n < 2:
        raise TrainingError(f"{n} example(s) cannot be split into training and validation: give at least 2")
    target = max(1, math.ceil(validation_fraction * n))
    names = sorted(set(episodes))
    if len(names) >= 2:
        rows: dict[str, list[int]] = {}
        for i, ep in enumerate(episodes):
            rows.setdefault(ep, []).append(i)
        held: list[str] = []
        count = 0
        for ep in sorted(names, key=lambda e: _hash(seed, e)):
            if count >= target or len(held) == len(names) - 1:
                break
            held.append(ep)
            count += len(rows[ep])
        held_set = set(held)
        validation = sorted(i for ep in held for i in rows[ep])
        train = [i for i in range(n) if episodes[i] not in held_set]
        return Split(train, validation, "episode", len(names) - len(held), len(held))
    order = sorted(range(n), key=lambda i: _hash(seed, str(i)))
    validation = sorted(order[:min(target, n - 1)])
    held_rows = set(validation)
    return Split([i for i in range(n) if i not in held_rows], validation, "example", 1, 1)


def _hash(seed: int, name: str) -> str:
    return hashlib.sha256(f"{seed}\0{name}".encode()).hexdigest()


# --- run identity and checkpoints -------------------------------------------------------------

def run_fingerprint(settings: LoraSettings, dataset_dir: Path, *, base: str, max_steps: int | None,
                    validation_fraction: float, seed: int) -> dict[str, Any]:
    """What shapes a run's weights, each part hashed, and one fingerprint over all of them. Checkpoint
    and evaluation intervals are left out: they change when weights are saved, not what they are."""
    digest = hashlib.sha256()
    with open(Path(dataset_dir) / DATASET_FILE, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    parts = {
        "settings": settings.model_dump(mode="json"),
        "dataset_sha256": digest.hexdigest(),
        "base": base,
        "max_steps": max_steps,
        "validation_fraction": validation_fraction,
        "seed": seed,
    }
    return {"fingerprint": hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest(), "parts": parts}


def _checkpoints(ckpt_dir: Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) of every checkpoint directory, oldest first. The trainer writes the
    trainer state last, so a checkpoint without a readable one was cut off by a killed process."""
    found = []
    if ckpt_dir.is_dir():
        for p in ckpt_dir.iterdir():
            m = _CHECKPOINT.match(p.name)
            if m and p.is_dir():
                found.append((int(m.group(1)), p, _complete(p)))
    return sorted(found)


def _complete(path: Path) -> bool:
    try:
        json.loads((path / _TRAINER_STATE).read_text())
    except (OSError, ValueError):
        return False
    return True


def resume_point(out_dir: Path, identity: dict[str, Any]) -> Path | None:
    """The newest complete checkpoint of this run under ``out_dir``, or None to start afresh.

    Raises ``TrainingError`` when a complete checkpoint exists but ``run.json`` says it belongs to
    another run (or nothing says which run it belongs to). Checkpoints cut off by a killed process
    are removed, since the resumed run writes them again.
    """
    out_dir = Path(out_dir)
    found = _checkpoints(out_dir / CHECKPOINTS)
    complete = [(step, p) for step, p, ok in found if ok]
    last = complete[-1][1] if complete else None
    if last is not None:
        run_file = out_dir / RUN_FILE
        try:
            stored = json.loads(run_file.read_text())
        except (OSError, ValueError):
            stored = None
        if not isinstance(stored, dict) or stored.get("fingerprint") != identity["fingerprint"]:
            if isinstance(stored, dict) and isinstance(stored.get("parts"), dict):
                changed = sorted(k for k in identity["parts"] if stored["parts"].get(k) != identity["parts"][k])
                why = f"{', '.join(changed) or 'the run'} changed since they were written"
            else:
                why = f"{run_file} is missing or unreadable, so nothing says which run they belong to"
            raise TrainingError(
                f"{out_dir / CHECKPOINTS} holds checkpoints (newest {last.name}) of another run: {why}. Resuming "
                f"would mix two runs. Use a new output directory, or delete {out_dir / CHECKPOINTS} to train this "
                "run from the start.")
    for step, p, ok in found:
        if not ok and (last is None or step > complete[-1][0]):
            shutil.rmtree(p, ignore_errors=True)
    return last


# --- training ----------------------------------------------------------------------------------

def _rank_zero() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _per_device_batch(settings: LoraSettings) -> int:
    """``settings.batch_size`` is the batch of one optimizer step over every process (``accelerate launch``)."""
    return max(1, settings.batch_size // int(os.environ.get("WORLD_SIZE", "1")))


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """No Hugging Face Hub requests for the duration: the env flag for code that reads it later, and
    huggingface_hub's own flag, which it reads once at import."""
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    saved_constant = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved
        if constants is not None:
            constants.HF_HUB_OFFLINE = saved_constant


CPU_LM_HEAD_TILE = 4096
"""Vocabulary columns per tile of trl's fused LM head on CPU. trl 1.16 uses 32768 (tuned for GPUs): on CPU
each tile is copied a few times in fp32, which for one 1,900-token sequence of the embedded base peaked
at 1.9 GB for the head alone, against 0.2 GB with 4096-column tiles, at the same speed."""


@contextlib.contextmanager
def cpu_lm_head_tiles(device) -> Iterator[None]:
    """Narrower LM-head tiles for the duration when training on CPU (trl reads the module constant per
    call; a trl without it is left alone)."""
    from trl.trainer import utils as trl_utils

    name = "_CHUNKED_LOGPROB_CHUNK_SIZE"
    saved = getattr(trl_utils, name, None)
    if getattr(device, "type", str(device)) != "cpu" or saved is None:
        yield
        return
    setattr(trl_utils, name, min(saved, CPU_LM_HEAD_TILE))
    try:
        yield
    finally:
        setattr(trl_utils, name, saved)


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _callbacks(progress: Progress | None, stream):
    """The progress and timing callback (a ``TrainerCallback``; imported lazily with transformers)."""
    from transformers import TrainerCallback

    class Meter(TrainerCallback):
        """Prints one line per log, relays it to ``progress`` and times the optimizer steps of this process."""

        def __init__(self) -> None:
            self.step_seconds: list[float] = []
            self.tokens_start = 0
            self.tokens_end = 0
            self._began = 0.0
            self._t0 = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            self._t0 = time.perf_counter()
            self.tokens_start = self.tokens_end = state.num_input_tokens_seen

        def on_step_begin(self, args, state, control, **kwargs):
            self._began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.step_seconds.append(time.perf_counter() - self._began)
            self.tokens_end = state.num_input_tokens_seen

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = {k: v for k, v in (logs or {}).items() if isinstance(v, int | float)}
            step, total = state.global_step, state.max_steps
            if "eval_loss" in logs:
                line = f"step {step}/{total}  validation loss {logs['eval_loss']:.4f}"
            elif "loss" in logs:
                done = len(self.step_seconds)
                per_step = (time.perf_counter() - self._t0) / done if done else math.nan
                line = (f"step {step}/{total}  loss {logs['loss']:.4f}  lr {logs.get('learning_rate', 0):.2e}  "
                        f"{per_step:.2f} s/step  eta {_duration(per_step * (total - step))}")
            else:
                return
            if state.is_world_process_zero:
                print(line, file=stream, flush=True)
                if progress is not None:
                    progress(step, total, logs)

    return Meter()


def build_trainer(model, tokenizer, train_rows: list[dict], validation_rows: list[dict], settings: LoraSettings,
                  checkpoint_dir: Path, *, max_steps: int | None = None, eval_every: int = 1, save_every: int = 1,
                  seed: int = 0, evaluate_first: bool = True, gradient_checkpointing: bool = True,
                  micro_batch: int | None = None, callbacks=()):
    """The ``SFTTrainer`` a run uses: LoRA from ``settings`` on ``model``, loss on the completion only.

    Memory is bounded two ways (the embedded base on CPU measured about 10 GB peak at batch 4 x 400
    tokens without either). Activation checkpointing keeps one layer's activations instead of all
    of them. On CPU each optimizer step accumulates ``settings.batch_size`` micro-batches of one
    sequence (``micro_batch``): an unpadded sequence runs the memory-efficient causal attention
    kernel, while a padded batch needs a mask, which sends torch's CPU attention to the math path that
    stores every attention matrix. The loss is the same: trl divides by the completion tokens of the
    whole step either way.
    """
    import torch
    from datasets import Dataset
    from datasets.utils import logging as datasets_logging
    from peft import LoraConfig
    from transformers import PrinterCallback, ProgressCallback
    from trl import SFTConfig, SFTTrainer

    cuda = torch.cuda.is_available()
    per_device = _per_device_batch(settings)
    micro = micro_batch or (per_device if cuda else 1)
    if per_device % micro:
        raise TrainingError(f"micro_batch={micro} does not divide the per-device batch of {per_device}")
    args = SFTConfig(
        output_dir=str(checkpoint_dir),
        per_device_train_batch_size=micro,
        per_device_eval_batch_size=micro,
        gradient_accumulation_steps=per_device // micro,
        learning_rate=settings.learning_rate,
        num_train_epochs=settings.epochs,
        max_steps=max_steps if max_steps is not None else -1,
        lr_scheduler_type=settings.lr_scheduler,
        warmup_steps=settings.warmup_ratio,  # a float below 1 is a ratio of the total steps (transformers 5)
        logging_strategy="steps",
        logging_steps=1,
        logging_first_step=True,
        eval_strategy="steps",
        eval_steps=eval_every,
        eval_on_start=evaluate_first,
        prediction_loss_only=True,
        save_strategy="steps",
        save_steps=save_every,
        save_total_limit=KEEP_CHECKPOINTS,
        max_length=settings.max_length,
        completion_only_loss=True,  # labels of prompt tokens are -100
        assistant_only_loss=False,
        packing=False,
        include_num_input_tokens_seen="non_padding",
        activation_checkpointing=gradient_checkpointing,  # transformers 5 name; trl reads the mirrored old one
        gradient_checkpointing=gradient_checkpointing,
        bf16=bool(cuda and torch.cuda.is_bf16_supported()),
        fp16=False,
        seed=seed,
        data_seed=seed,
        dataloader_num_workers=0,
        dataloader_pin_memory=cuda,
        report_to="none",
        disable_tqdm=True,
        push_to_hub=False,
    )
    peft_config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                             target_modules=list(settings.target_modules), bias="none", task_type="CAUSAL_LM")

    def dataset(rows: list[dict]) -> Dataset:
        return Dataset.from_dict({"prompt": [r["prompt"] for r in rows], "completion": [r["completion"] for r in rows]})

    model.config.use_cache = False
    bars_were_on = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()  # one bar per preparation pass of a few examples is only noise
    try:
        trainer = SFTTrainer(model=model, args=args, train_dataset=dataset(train_rows),
                             eval_dataset=dataset(validation_rows), processing_class=tokenizer, peft_config=peft_config,
                             callbacks=list(callbacks))
    finally:
        if bars_were_on:
            datasets_logging.enable_progress_bar()
    for printer in (PrinterCallback, ProgressCallback):  # progress lines come from our own callback, on stderr
        trainer.remove_callback(printer)
    return trainer


def train_adapter(dataset_dir: Path, settings: LoraSettings, out_dir: Path, *, base: str = EMBEDDED_BASE,
                  max_steps: int | None = None, validation_fraction: float = 0.1, eval_every: int | None = None,
                  save_every: int | None = None, seed: int = 0, progress: Progress | None = None) -> TrainingResult:
    """Train a LoRA adapter on ``dataset_dir`` into ``out_dir`` (resuming a killed run there); see the module doc.

    ``max_steps`` caps the optimizer steps (default: ``settings.epochs`` epochs). ``eval_every`` and
    ``save_every`` default to about a quarter of the run.
    """
    dataset_dir, out_dir = Path(dataset_dir), Path(out_dir)
    if max_steps is not None and max_steps < 1:
        raise TrainingError(f"max_steps={max_steps}: give at least 1 step, or none to train {settings.epochs} epoch(s)")
    for name, value in (("eval_every", eval_every), ("save_every", save_every)):
        if value is not None and value < 1:
            raise TrainingError(f"{name}={value}: give a number of steps of at least 1")
    rows = load_examples(dataset_dir)
    split = split_examples([r["episode"] for r in rows], validation_fraction, seed)
    identity = run_fingerprint(settings, dataset_dir, base=base, max_steps=max_steps,
                               validation_fraction=validation_fraction, seed=seed)
    resume = resume_point(out_dir, identity)
    steps_per_epoch = math.ceil(len(split.train) / (_per_device_batch(settings) * int(os.environ.get("WORLD_SIZE", "1"))))
    planned = max_steps if max_steps is not None else settings.epochs * steps_per_epoch
    interval = max(1, planned // EVALUATIONS_PER_RUN)
    eval_every, save_every = eval_every or interval, save_every or interval
    if _rank_zero():
        out_dir.mkdir(parents=True, exist_ok=True)
        if resume is None:
            write_json_atomic(out_dir / RUN_FILE, {**identity, "dataset": str(dataset_dir.resolve())})
        for stale in out_dir.glob(f".{ADAPTER}.*"):
            shutil.rmtree(stale, ignore_errors=True)

    configure_torch_threads()
    with hub_offline():
        try:
            model, tokenizer = load_base(base)
        except BaseModelError as exc:
            raise TrainingError(str(exc)) from exc
        meter = _callbacks(progress, sys.stderr)
        trainer = build_trainer(model, tokenizer, [rows[i] for i in split.train], [rows[i] for i in split.validation],
                                settings, out_dir / CHECKPOINTS, max_steps=max_steps, eval_every=eval_every,
                                save_every=save_every, seed=seed, evaluate_first=resume is None, callbacks=[meter])
        for name, ds in (("training", trainer.train_dataset), ("validation", trainer.eval_dataset)):
            if len(ds) == 0:
                raise TrainingError(f"every {name} example of {dataset_dir / DATASET_FILE} has its completion beyond "
                                    f"max_length={settings.max_length} tokens: raise max_length or shorten the prompts")
        too_long = len(split.train) + len(split.validation) - len(trainer.train_dataset) - len(trainer.eval_dataset)
        if resume is not None and _rank_zero():
            print(f"resuming from {resume}", file=sys.stderr, flush=True)
        adapter_dir = out_dir / ADAPTER
        with warnings.catch_warnings(), cpu_lm_head_tiles(trainer.args.device):
            # peft looks for a config.json beside the GGUF to see whether the vocabulary changed; it did not
            warnings.filterwarnings("ignore", message="Could not find a config file", category=UserWarning)
            started = time.perf_counter()
            trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
            train_seconds = time.perf_counter() - started
            if trainer.is_world_process_zero():
                _save_adapter(trainer.model, adapter_dir)
    state = trainer.state
    train_curve = [[e["step"], e["loss"]] for e in state.log_history if "loss" in e]
    eval_curve = [[e["step"], e["eval_loss"]] for e in state.log_history if "eval_loss" in e]
    initial = next((loss for step, loss in eval_curve if step == 0), None)
    final = next((loss for step, loss in reversed(eval_curve) if step == state.global_step), None)
    timed = sum(meter.step_seconds)
    result = TrainingResult(
        base=base,
        dataset=str(dataset_dir),
        out_dir=str(out_dir),
        adapter_dir=str(adapter_dir),
        settings=settings.model_dump(mode="json"),
        fingerprint=identity["fingerprint"],
        seed=seed,
        validation_fraction=validation_fraction,
        split_by=split.by,
        examples_train=len(split.train),
        examples_validation=len(split.validation),
        episodes_train=split.episodes_train,
        episodes_validation=split.episodes_validation,
        examples_too_long=too_long,
        max_steps=state.max_steps,
        global_step=state.global_step,
        epochs=float(state.epoch or 0.0),
        eval_every=eval_every,
        save_every=save_every,
        train_loss=train_curve,
        validation_loss=eval_curve,
        initial_validation_loss=initial,
        final_validation_loss=final,
        steps_this_run=len(meter.step_seconds),
        seconds_per_step=timed / len(meter.step_seconds) if meter.step_seconds else None,
        tokens_per_second=(meter.tokens_end - meter.tokens_start) / timed if timed > 0 else None,
        tokens_trained=int(state.num_input_tokens_seen),
        train_seconds=round(train_seconds, 3),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        resumed_from=str(resume) if resume is not None else None,
        device=str(trainer.args.device),
    )
    if trainer.is_world_process_zero():
        write_json_atomic(out_dir / RESULT_FILE, result.to_dict())
    del trainer, model
    gc.collect()
    return result


def _save_adapter(model, adapter_dir: Path) -> None:
    """``save_pretrained`` into a temp directory beside ``adapter_dir``, then renamed over it."""
    tmp = adapter_dir.with_name(f".{adapter_dir.name}.tmp-{os.getpid()}")
    old = adapter_dir.with_name(f".{adapter_dir.name}.old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    if adapter_dir.exists():
        os.replace(adapter_dir, old)
    os.replace(tmp, adapter_dir)
    shutil.rmtree(old, ignore_errors=True)


# --- command line ------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m automem_dagster.training.sft", description=__doc__.splitlines()[0])
    p.add_argument("--dataset", type=Path, required=True, help=f"directory holding {DATASET_FILE}")
    p.add_argument("--settings", type=Path, required=True, help="LoraSettings as JSON")
    p.add_argument("--out", type=Path, required=True, help="run directory (rerun with the same one to resume)")
    p.add_argument("--base", default=EMBEDDED_BASE, help="`embedded` or a local Hugging Face model directory")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--save-every", type=int, default=None)
    p.add_argument("--validation-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers and huggingface_hub are imported
    from pydantic import ValidationError

    try:
        settings = LoraSettings.model_validate_json(args.settings.read_text())
    except (OSError, ValidationError) as exc:
        print(f"settings {args.settings}: {exc}", file=sys.stderr)
        return 2
    try:
        train_adapter(args.dataset, settings, args.out, base=args.base, max_steps=args.max_steps,
                      validation_fraction=args.validation_fraction, eval_every=args.eval_every,
                      save_every=args.save_every, seed=args.seed)
    except TrainingError as exc:
        print(f"training failed: {exc}", file=sys.stderr)
        return 1
    print(args.out / RESULT_FILE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
