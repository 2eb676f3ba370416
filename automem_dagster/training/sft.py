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
- Progress: one line per logged step on stderr (step, loss, ``train_s_per_step``, ETA; at a
  validation, its loss and ``validation_s_per_pass``), and the caller's ``progress(step, total,
  logs)`` when given. The timings keep these names in the result and in MLflow (``training/metering.py``).
- No Hub access while training and no reporting integrations: the caller logs the result.
- Steps sized to the device (``training/device_plan.py``): on a GPU the largest micro-batch its free
  memory holds, padding-free, bf16 weights where bf16 is native, checkpointing only when needed; on
  the CPU bounded memory: one unpadded sequence per micro-batch, narrower LM-head tiles, activation
  checkpointing for long examples only. The embedded base measured 1.4-1.7 GB peak RSS on ~400-token
  examples with checkpointing, 1.65 GB on ~300-token ones without, and 3.1 GB on 1,900-token ones
  (max_length 2048, checkpointed), model loading included.

Command line (the resume test kills this process)::

    python -m automem_dagster.training.sft --dataset DIR --settings settings.json --out DIR [--max-steps N]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.training.base_model import EMBEDDED_BASE, BaseModelError, configure_torch_threads, load_base
from automem_dagster.training.checkpoints import resume_point, run_fingerprint, save_adapter
from automem_dagster.training.device_plan import device_plan
from automem_dagster.training.examples import Split, load_examples, split_examples
from automem_dagster.training.metering import meter_callback
from automem_dagster.training.runtime import (
    cpu_lm_head_tiles,
    device_name,
    hub_offline,
    peak_device_memory_mb,
    per_device_batch,
    rank_zero,
    steps_per_epoch,
)
from automem_dagster.training.settings import LoraSettings
from automem_dagster.training.sft_config import trainer_configs
from automem_dagster.training.sft_result import (
    ADAPTER,
    CHECKPOINTS,
    DATASET_FILE,
    RESULT_FILE,
    RUN_FILE,
    TrainingError,
    TrainingProgress,
    TrainingResult,
)
from automem_dagster.training.trainer import trainer_class

EVALUATIONS_PER_RUN = 4
"""Without ``eval_every``/``save_every`` a run evaluates and checkpoints about this many times."""


def build_trainer(model, tokenizer, train_rows: list[dict], validation_rows: list[dict], settings: LoraSettings,
                  checkpoint_dir: Path, *, max_steps: int | None = None, eval_every: int = 1, save_every: int = 1,
                  seed: int = 0, evaluate_first: bool = True, gradient_checkpointing: bool | None = None,
                  micro_batch: int | None = None, padding_free: bool | None = None, callbacks=()):
    """The ``SFTTrainer`` a run uses: LoRA from ``settings`` on ``model``, loss on the completion only.

    How the steps run on this device (micro-batch, checkpointing, bf16 weights, padding-free batches)
    comes from ``training/device_plan.py``; ``gradient_checkpointing``, ``micro_batch`` and
    ``padding_free`` override it. The embedded base on CPU measured about 10 GB peak at batch 4 x 400
    tokens in one padded micro-batch without checkpointing, hence the CPU plan of one unpadded
    sequence per micro-batch, checkpointed when it is long. The losses do not depend on the split: trl divides
    the training loss by the completion tokens of the whole step, and the validation loss is
    token-weighted likewise (``training/trainer.py``).
    """
    import torch
    from datasets import Dataset
    from datasets.utils import logging as datasets_logging
    from transformers import PrinterCallback, ProgressCallback
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    plan = device_plan(per_device_batch(settings),
                       lambda: longest_example(tokenizer, train_rows + validation_rows, settings.max_length), model)
    micro = micro_batch or plan.micro_batch
    checkpointing = plan.gradient_checkpointing if gradient_checkpointing is None else gradient_checkpointing
    packed = (plan.padding_free and micro > 1) if padding_free is None else padding_free
    if plan.bf16:
        model.to(torch.bfloat16)
    args, peft_config = trainer_configs(settings, checkpoint_dir, max_steps=max_steps, eval_every=eval_every,
                                        save_every=save_every, seed=seed, evaluate_first=evaluate_first,
                                        gradient_checkpointing=checkpointing, micro_batch=micro, bf16=plan.bf16)

    def dataset(rows: list[dict]) -> Dataset:
        return Dataset.from_dict({"prompt": [r["prompt"] for r in rows], "completion": [r["completion"] for r in rows]})

    model.config.use_cache = False
    bars_were_on = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()  # one bar per preparation pass of a few examples is only noise
    try:
        with library_warnings_silenced():
            trainer = trainer_class()(model=model, args=args, train_dataset=dataset(train_rows),
                                 eval_dataset=dataset(validation_rows), processing_class=tokenizer,
                                 peft_config=peft_config, callbacks=list(callbacks))
    finally:
        if bars_were_on:
            datasets_logging.enable_progress_bar()
    for printer in (PrinterCallback, ProgressCallback):  # progress lines come from our own callback, on stderr
        trainer.remove_callback(printer)
    if packed:
        # trl's own padding-free collator on the examples trl has already truncated to max_length (its
        # ``padding_free`` option refuses max_length without packing, and packing would change how many
        # examples a step holds).
        trainer.data_collator = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=True)
        trainer.padding_free = True
    trainer.device_plan = plan
    return trainer


def longest_example(tokenizer, rows: list[dict], max_length: int) -> int:
    """Tokens of the longest example as trl will train it (its chat template, cut at ``max_length``)."""
    return min(max_length, max(len(tokenizer.apply_chat_template(r["prompt"] + r["completion"], return_dict=False))
                               for r in rows))


@dataclass(frozen=True)
class RunPlan:
    """A run decided before the model is loaded: its examples and split, identity, resume point and intervals."""

    dataset_dir: Path
    out_dir: Path
    settings: LoraSettings
    base: str
    max_steps: int | None
    validation_fraction: float
    seed: int
    rows: list[dict]
    split: Split
    identity: dict
    resume: Path | None
    eval_every: int
    save_every: int


def plan_run(dataset_dir: Path, settings: LoraSettings, out_dir: Path, *, base: str, max_steps: int | None,
             validation_fraction: float, eval_every: int | None, save_every: int | None, seed: int) -> RunPlan:
    """Check the options and the dataset, split it, find the checkpoint to resume from, and (rank
    zero) record the run's identity in ``out_dir`` and clear an interrupted adapter write."""
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
    per_device_batch(settings)  # refuses, before any model loads, a batch the processes cannot share
    planned = max_steps if max_steps is not None else settings.epochs * steps_per_epoch(len(split.train), settings)
    interval = max(1, planned // EVALUATIONS_PER_RUN)
    if rank_zero():
        out_dir.mkdir(parents=True, exist_ok=True)
        if resume is None:
            write_json_atomic(out_dir / RUN_FILE, {**identity, "dataset": str(dataset_dir.resolve())})
        for stale in out_dir.glob(f".{ADAPTER}.*"):
            shutil.rmtree(stale, ignore_errors=True)
    return RunPlan(dataset_dir, out_dir, settings, base, max_steps, validation_fraction, seed, rows, split, identity,
                   resume, eval_every or interval, save_every or interval)


def train_adapter(dataset_dir: Path, settings: LoraSettings, out_dir: Path, *, base: str = EMBEDDED_BASE,
                  max_steps: int | None = None, validation_fraction: float = 0.1, eval_every: int | None = None,
                  save_every: int | None = None, seed: int = 0, progress: TrainingProgress | None = None) -> TrainingResult:
    """Train a LoRA adapter on ``dataset_dir`` into ``out_dir`` (resuming a killed run there); see the module doc.

    ``max_steps`` caps the optimizer steps (default: ``settings.epochs`` epochs). ``eval_every`` and
    ``save_every`` default to about a quarter of the run.
    """
    plan = plan_run(dataset_dir, settings, out_dir, base=base, max_steps=max_steps,
                    validation_fraction=validation_fraction, eval_every=eval_every, save_every=save_every, seed=seed)
    configure_torch_threads()
    with hub_offline():
        try:
            model, tokenizer = load_base(base)
        except BaseModelError as exc:
            raise TrainingError(str(exc)) from exc
        meter = meter_callback(progress, sys.stderr)
        trainer = build_trainer(model, tokenizer, [plan.rows[i] for i in plan.split.train],
                                [plan.rows[i] for i in plan.split.validation], settings, plan.out_dir / CHECKPOINTS,
                                max_steps=max_steps, eval_every=plan.eval_every, save_every=plan.save_every, seed=seed,
                                evaluate_first=plan.resume is None, callbacks=[meter])
        too_long = _dropped_examples(plan, trainer)
        wall_s = _train(plan, trainer)
    result = _training_result(plan, trainer, meter, too_long, wall_s)
    if trainer.is_world_process_zero():
        write_json_atomic(plan.out_dir / RESULT_FILE, result.to_dict())
    del trainer, model
    gc.collect()
    return result


def _dropped_examples(plan: RunPlan, trainer) -> int:
    """How many examples trl dropped (completion beyond ``max_length``); refuses a side left empty."""
    for name, ds in (("training", trainer.train_dataset), ("validation", trainer.eval_dataset)):
        if len(ds) == 0:
            raise TrainingError(f"every {name} example of {plan.dataset_dir / DATASET_FILE} has its completion beyond "
                                f"max_length={plan.settings.max_length} tokens: raise max_length or shorten the prompts")
    return len(plan.split.train) + len(plan.split.validation) - len(trainer.train_dataset) - len(trainer.eval_dataset)


@contextmanager
def library_warnings_silenced():
    """Two library warnings that say nothing about this run: peft looks for a config.json beside
    the GGUF to see whether the vocabulary changed (it did not), and peft and trl read
    transformers 5's deprecated alias ``is_gradient_checkpointing`` (their code, not ours)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Could not find a config file", category=UserWarning)
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def _train(plan: RunPlan, trainer) -> float:
    """Run (or resume) the trainer and save the adapter; returns the seconds ``trainer.train`` took (``wall_s``)."""
    if plan.resume is not None and rank_zero():
        print(f"resuming from {plan.resume}", file=sys.stderr, flush=True)
    with library_warnings_silenced(), cpu_lm_head_tiles(trainer.args.device):
        started = time.perf_counter()
        trainer.train(resume_from_checkpoint=str(plan.resume) if plan.resume is not None else None)
        wall_s = time.perf_counter() - started
        if trainer.is_world_process_zero():
            save_adapter(trainer.model, plan.out_dir / ADAPTER)
    return wall_s


def _training_result(plan: RunPlan, trainer, meter, too_long: int, wall_s: float) -> TrainingResult:
    """The run's record from the trainer's log history and this process's timings."""
    state, split = trainer.state, plan.split
    train_curve = [[e["step"], e["loss"]] for e in state.log_history if "loss" in e]
    eval_curve = [[e["step"], e["eval_loss"]] for e in state.log_history if "eval_loss" in e]
    args = trainer.args
    return TrainingResult(
        base=plan.base, dataset=str(plan.dataset_dir), out_dir=str(plan.out_dir), adapter_dir=str(plan.out_dir / ADAPTER),
        settings=plan.settings.model_dump(mode="json"), fingerprint=plan.identity["fingerprint"], seed=plan.seed,
        validation_fraction=plan.validation_fraction, split_by=split.by, examples_train=len(split.train),
        examples_validation=len(split.validation), episodes_train=split.episodes_train,
        episodes_validation=split.episodes_validation, examples_too_long=too_long, max_steps=state.max_steps,
        global_step=state.global_step, epochs=float(state.epoch or 0.0), eval_every=plan.eval_every,
        save_every=plan.save_every, train_loss=train_curve, validation_loss=eval_curve,
        initial_validation_loss=next((loss for step, loss in eval_curve if step == 0), None),
        final_validation_loss=next((loss for step, loss in reversed(eval_curve) if step == state.global_step), None),
        steps_this_run=len(meter.step_seconds), **meter.figures(), validation_passes=len(meter.validation_seconds),
        tokens_trained=int(state.num_input_tokens_seen), wall_s=round(wall_s, 3),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        peak_device_memory_mb=peak_device_memory_mb(args.device),
        resumed_from=str(plan.resume) if plan.resume is not None else None, device=str(args.device),
        device_name=device_name(args.device), precision=weights_precision(trainer.model),
        micro_batch=args.per_device_train_batch_size, gradient_accumulation=args.gradient_accumulation_steps,
        gradient_checkpointing=bool(args.gradient_checkpointing), padding_free=bool(trainer.padding_free),
    )


def weights_precision(model) -> str:
    """The dtype of the base's weights (the LoRA matrices stay fp32): ``bf16`` or ``fp32``."""
    dtype = str(model.get_input_embeddings().weight.dtype).removeprefix("torch.")
    return {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}.get(dtype, dtype)


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
    p.add_argument("--events", action="store_true",
                   help="print each logged step as a JSON event line on stdout (for training.launch)")
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
                      save_every=args.save_every, seed=args.seed, progress=_event_printer() if args.events else None)
    except TrainingError as exc:
        print(f"training failed: {exc}", file=sys.stderr)
        return 1
    print(args.out / RESULT_FILE)
    return 0


def _event_printer() -> TrainingProgress:
    """Each logged step as one line on stdout, which ``training.launch`` turns back into progress calls."""
    from automem_dagster.training.launch import EVENT_PREFIX

    def emit(step: int, total: int, logs: dict[str, float]) -> None:
        print(EVENT_PREFIX + json.dumps({"step": step, "total": total, "logs": logs}), flush=True)

    return emit


if __name__ == "__main__":
    raise SystemExit(main())
