"""The training stage on any device, checked on the CPU: the effective batch over several processes,
losses that do not depend on the micro-batch, the step-time meter and the device-sized micro-batch."""

import time

import pandas as pd
import pytest
from sft_examples import TINY, decision_rows, embedded_tokenizer

from automem_dagster.training.device_plan import (
    CPU_ACTIVATION_BUDGET,
    DevicePlan,
    ModelShape,
    activation_bytes,
    native_bf16,
    plan_for_device,
)
from automem_dagster.training.metering import meter_callback
from automem_dagster.training.runtime import per_device_batch, steps_per_epoch
from automem_dagster.training.sft import build_trainer, longest_example, train_adapter
from automem_dagster.training.sft_config import trainer_configs
from automem_dagster.training.sft_result import TrainingError

# --- several processes ---------------------------------------------------------------------------

@pytest.mark.parametrize("batch, world, per_device, steps", [(4, 1, 4, 3), (4, 2, 2, 3), (8, 4, 2, 2), (6, 3, 2, 2),
                                                           (16, 8, 2, 1)])
def test_the_effective_batch_is_the_batch_over_every_process(monkeypatch, tmp_path, batch, world, per_device, steps):
    """``batch_size`` examples per optimizer step over all processes: each takes its share, the trainer's
    micro-batches times accumulation make exactly that share, and an epoch of 10 examples is
    ceil(10 / batch_size) steps whatever the number of processes."""
    monkeypatch.setenv("WORLD_SIZE", str(world))
    settings = TINY.model_copy(update={"batch_size": batch})
    assert per_device_batch(settings) == per_device and per_device * world == batch
    assert steps_per_epoch(10, settings) == steps
    for micro in {1, per_device}:
        args, _ = trainer_configs(settings, tmp_path, max_steps=None, eval_every=1, save_every=1, seed=0,
                                  evaluate_first=False, gradient_checkpointing=False, micro_batch=micro)
        assert args.per_device_train_batch_size * args.gradient_accumulation_steps * world == batch


@pytest.mark.parametrize("batch, world, nearest", [(4, 8, "8"), (6, 4, "4 or 8"), (7, 2, "6 or 8"), (9, 4, "8"),
                                                   (11, 4, "12")])
def test_a_batch_the_processes_cannot_share_is_refused_before_training(monkeypatch, tmp_path, batch, world, nearest):
    monkeypatch.setenv("WORLD_SIZE", str(world))
    settings = TINY.model_copy(update={"batch_size": batch})
    message = rf"batch_size={batch} cannot be shared by {world} training processes.*the nearest being {nearest}$"
    with pytest.raises(TrainingError, match=message):
        per_device_batch(settings)
    pd.DataFrame(decision_rows()).to_parquet(tmp_path / "dataset.parquet")
    with pytest.raises(TrainingError, match=message):  # from the run's plan, before any model is loaded
        train_adapter(tmp_path, settings, tmp_path / "run", max_steps=1)
    assert not (tmp_path / "run").exists()


# --- losses that do not depend on the micro-batch -----------------------------------------------

def _uneven_rows():
    """Eight memory decisions whose completions run from 1 to 8 operations, so a mean per micro-batch
    and a mean per token differ."""
    rows = decision_rows(episodes=2, per_episode=4)
    for i, row in enumerate(rows):
        extra = "".join(f"<|APPEND|>notes.txt|seen at step {i}, note {k}\n" for k in range(i))
        row["completion"] = [{"role": "assistant", "content": extra + row["completion"][0]["content"]}]
    return rows


def _tiny_trainer(base, rows, micro, tmp_path, lora=None, padding_free=False):
    """The project's trainer on a copy of ``base`` (a tiny random llama with the embedded tokenizer), one
    optimizer step of ``TINY``'s batch 4 in micro-batches of ``micro``; ``lora`` sets the adapter's start."""
    import copy

    trainer = build_trainer(copy.deepcopy(base), embedded_tokenizer(), rows[:4], rows[4:], TINY,
                            tmp_path / f"ckpt{micro}{padding_free}", max_steps=1, eval_every=1, save_every=1,
                            evaluate_first=False, gradient_checkpointing=False, micro_batch=micro,
                            padding_free=padding_free)
    if lora is not None:
        trainer.model.load_state_dict(lora, strict=False)
    return trainer


def _lora(trainer):
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items() if "lora_" in k}


def test_validation_and_training_losses_do_not_depend_on_the_micro_batch(tmp_path):
    """The same weights give the same validation loss with micro-batches 1 x 4 and 4 x 1, padded or
    padding-free (the mean over every completion token of the set), and the same first update and train loss."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=len(embedded_tokenizer()), hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4))
    rows = _uneven_rows()
    one = _tiny_trainer(base, rows, 1, tmp_path)
    start = _lora(one)
    four = _tiny_trainer(base, rows, 4, tmp_path, lora=start)
    packed = _tiny_trainer(base, rows, 4, tmp_path, lora=start, padding_free=True)
    assert (one.args.per_device_train_batch_size, one.args.gradient_accumulation_steps) == (1, 4)
    assert (four.args.per_device_train_batch_size, four.args.gradient_accumulation_steps) == (4, 1)
    assert "attention_mask" in next(iter(four.get_eval_dataloader()))
    flat = next(iter(packed.get_eval_dataloader()))  # the four examples in one sequence, no padding
    assert "attention_mask" not in flat and flat["input_ids"].shape[0] == 1
    assert int((flat["position_ids"][0] == 0).sum()) == 4
    # The validation loss of the same weights, and by hand: summed token losses over all tokens.
    by_one, by_four, by_packed = (t.evaluate()["eval_loss"] for t in (one, four, packed))
    assert abs(by_one - by_four) < 1e-4 and abs(by_one - by_packed) < 1e-4, (by_one, by_four, by_packed)
    losses, tokens = 0.0, 0
    for batch in one.get_eval_dataloader():
        with torch.no_grad():
            logits = one.model(input_ids=batch["input_ids"]).logits[0, :-1]
        labels = batch["labels"][0, 1:]
        losses += torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum").item()
        tokens += int((labels != -100).sum())
    assert abs(by_one - losses / tokens) < 1e-4
    # One optimizer step each from the same start: the same train loss and the same adapter after it.
    for trainer in (one, four, packed):
        trainer.train()
    [loss_one], [loss_four], [loss_packed] = ([e["loss"] for e in t.state.log_history if "loss" in e]
                                              for t in (one, four, packed))
    assert abs(loss_one - loss_four) < 1e-4 and abs(loss_one - loss_packed) < 1e-4, (loss_one, loss_four, loss_packed)
    after_one = _lora(one)
    moved = max((after_one[k] - start[k]).abs().max().item() for k in start)
    assert moved > 1e-4  # the step changed the adapter ...
    for other in (four, packed):  # ... the same way
        after = _lora(other)
        assert max((after_one[k] - after[k]).abs().max().item() for k in start) < 1e-3 * moved


# --- the meter -------------------------------------------------------------------------------------

def test_step_time_is_the_median_after_warm_up_and_tokens_per_second_counts_the_same_steps():
    """A slow first step (a first CUDA step compiles kernels) and one slow step later: the step time is
    the median of the steps after the first, and tokens per second those steps' tokens over their time."""
    import io

    from transformers import TrainerControl, TrainerState, TrainingArguments

    args = TrainingArguments(output_dir="unused", report_to="none")
    state, control = TrainerState(max_steps=5), TrainerControl()
    meter = meter_callback(None, io.StringIO())
    meter.on_train_begin(args, state, control)
    for step, (seconds, tokens) in enumerate([(0.30, 100), (0.02, 200), (0.02, 200), (0.12, 200), (0.02, 200)], 1):
        meter.on_step_begin(args, state, control)
        time.sleep(seconds)
        state.global_step, state.num_input_tokens_seen = step, state.num_input_tokens_seen + tokens
        meter.on_step_end(args, state, control)
    figures = meter.figures()
    assert 0.02 <= figures["train_s_per_step"] < 0.06  # the median, not the mean (0.096) nor with the first
    assert meter.step_tokens == [100, 200, 200, 200, 200]
    timed = sum(meter.step_seconds[1:])
    assert figures["tokens_per_second"] == pytest.approx(800 / timed)
    single = meter_callback(None, io.StringIO())  # a run of one step has nothing to leave out
    single.on_train_begin(args, TrainerState(max_steps=1), control)
    single.on_step_begin(args, state, control)
    single.on_step_end(args, state, control)
    assert single.figures()["train_s_per_step"] == single.step_seconds[0]


def test_the_mlflow_training_run_names_the_device_and_its_figures(tmp_path):
    """Tokens per second and peak device memory as metrics, the device's name and how the steps ran as
    params, as ``loop.report`` hands a result's record to the tracker."""
    from automem_dagster.tracking.run_fields import training_metrics, training_params
    from automem_dagster.tracking.runs import TrainingRun
    from automem_dagster.training.sft_result import FIGURES, TRAINED_ON

    record = {"tokens_per_second": 2241.0, "peak_device_memory_mb": 912.5, "train_s_per_step": 0.62,
              "device_name": "NVIDIA H200", "device": "cuda:0", "precision": "bf16", "micro_batch": 16,
              "gradient_accumulation": 1, "gradient_checkpointing": False, "padding_free": True}
    run = TrainingRun(game="crafter", family="crafter", scaffold_version=0, adapter="a1", base="embedded",
                      settings=TINY.model_dump(mode="json"), settings_source="default", dataset_hash="h",
                      examples_train=3, examples_validation=1, train_loss=[[1, 2.0]], validation_loss=[[0, 2.5]],
                      figures={k: record[k] for k in FIGURES if k in record},
                      trained_on={k: record[k] for k in TRAINED_ON if k in record}, adapter_dir=tmp_path)
    metrics = {m.key: m.value for m in training_metrics(run)}
    params = {p.key: p.value for p in training_params(run)}
    assert metrics["tokens_per_second"] == 2241.0 and metrics["peak_device_memory_mb"] == 912.5
    assert params["trained_on.device_name"] == "NVIDIA H200" and params["trained_on.micro_batch"] == "16"
    assert params["trained_on.precision"] == "bf16" and params["trained_on.padding_free"] == "True"


# --- sized to the device -------------------------------------------------------------------------

SMOLLM2 = ModelShape(hidden=576, intermediate=1536, layers=30, vocab=49152, parameters=134_515_008)


def test_the_micro_batch_is_the_largest_share_the_free_memory_holds():
    gib = 2**30
    # An H200's free memory: the whole share of batch 4 in one padding-free micro-batch, no checkpointing.
    h200 = plan_for_device(4, 550, SMOLLM2, 139 * gib, bf16=True)
    assert (h200.micro_batch, h200.gradient_checkpointing, h200.padding_free, h200.bf16) == (4, False, True, True)
    # 16 examples of 2,048 tokens in fp32: about 6.7 GB of activations each without checkpointing and
    # 1.1 GB with it. Less memory gives a smaller divisor of the share (the rest by accumulation), then
    # checkpointing, then one example with checkpointing whatever the estimate.
    for free_gib, micro, checkpointing in ((80, 8, False), (16, 1, False), (4, 2, True), (1, 1, True)):
        plan = plan_for_device(16, 2048, SMOLLM2, free_gib * gib, bf16=False)
        assert (plan.micro_batch, plan.gradient_checkpointing) == (micro, checkpointing), free_gib
        assert plan.padding_free == (micro > 1) and plan.free_memory_mb == free_gib * 1024
        if free_gib > 1:
            need = activation_bytes(SMOLLM2, micro * 2048, micro, checkpointing=checkpointing, element=4,
                                    padding_free=micro > 1)
            assert need <= free_gib * gib * 0.8 - SMOLLM2.parameters * 4
    # The CPU: one unpadded sequence in fp32, checkpointed only beyond the activation budget (2 GiB: 660 tokens
    # of the embedded base), so the ~300-token decisions train without it and 2,048-token ones keep it.
    assert activation_bytes(SMOLLM2, 661, 1, checkpointing=False, element=4, padding_free=False) > CPU_ACTIVATION_BUDGET
    for tokens, checkpointing in ((300, False), (660, False), (661, True), (2048, True)):
        assert plan_for_device(16, tokens, SMOLLM2, None, bf16=False) == DevicePlan(1, checkpointing, False, False, None)


def test_on_the_cpu_the_trainer_keeps_fp32_one_sequence_and_checkpoints_long_examples_only(tmp_path):
    """No bf16 without a GPU that computes it natively (a CPU, a T4 or V100 never get it); this tiny model's
    short examples fit the CPU's activation budget, so the trainer runs them without checkpointing."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    assert not native_bf16() or torch.cuda.is_available()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(embedded_tokenizer()), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    rows = decision_rows(episodes=1, per_episode=4)
    lengths = [len(embedded_tokenizer().apply_chat_template(r["prompt"] + r["completion"], return_dict=False)) for r in rows]
    tokenizer = embedded_tokenizer()
    assert longest_example(tokenizer, rows, 256) == max(lengths) and longest_example(tokenizer, rows, 16) == 16
    trainer = build_trainer(model, embedded_tokenizer(), rows, rows[:1], TINY, tmp_path / "ckpt", max_steps=1)
    if not torch.cuda.is_available():
        assert trainer.device_plan == DevicePlan(1, False, False, False, None) and not trainer.args.bf16
        assert (trainer.args.per_device_train_batch_size, trainer.args.gradient_accumulation_steps) == (1, 4)
        assert not trainer.args.gradient_checkpointing and not trainer.padding_free
        assert trainer.model.get_input_embeddings().weight.dtype == torch.float32
