"""The trainer's configuration: trl's ``SFTConfig`` and peft's ``LoraConfig`` for one run, from
the LoRA settings and the run's step budget and intervals."""

from __future__ import annotations

from pathlib import Path

from automem_dagster.training.runtime import per_device_batch
from automem_dagster.training.settings import LoraSettings
from automem_dagster.training.sft_result import TrainingError

KEEP_CHECKPOINTS = 3


def trainer_configs(settings: LoraSettings, checkpoint_dir: Path, *, max_steps: int | None, eval_every: int,
                    save_every: int, seed: int, evaluate_first: bool, gradient_checkpointing: bool,
                    micro_batch: int, bf16: bool = False):
    """``(SFTConfig, LoraConfig)``: the loss on the completion only, evaluation and checkpoints every
    ``eval_every``/``save_every`` steps, micro-batches of ``micro_batch`` accumulated to this process's
    share of ``settings.batch_size``, bf16 autocast when ``bf16`` (native bf16 only,
    ``training/device_plan.py``), no reporting and no Hub."""
    import torch
    from peft import LoraConfig
    from trl import SFTConfig

    cuda = torch.cuda.is_available()
    per_device = per_device_batch(settings)
    micro = micro_batch
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
        bf16=bf16,
        fp16=False,
        seed=seed,
        data_seed=seed,
        dataloader_num_workers=0,
        dataloader_pin_memory=cuda,
        report_to="none",
        disable_tqdm=True,
        push_to_hub=False,
    )
    return args, LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                            target_modules=list(settings.target_modules), bias="none", task_type="CAUSAL_LM")
