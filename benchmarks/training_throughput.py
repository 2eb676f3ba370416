"""Training throughput: the project's LoRA SFT stage beside plain transformers + peft on the same device and data.

The project's run is the real one (``automem_dagster.training.sft.train_adapter``: trl's SFTTrainer with a
peft LoRA, completion-only loss, held-out validation by episode, checkpoints, the micro-batch, precision
and padding of ``training/device_plan.py``) on a synthetic memory-decision dataset built here:
Crafter-like LOG and PLAN turns shaped like the agent's (a system prompt with the memory instructions
and the operation syntax; a user message with the memory file index, recent actions, the observation
and the phase; about 300 prompt tokens), whose completions follow fixed rules from the observation
(LOG: UPSERT what is seen, APPEND the outcome, DONE; PLAN: SEARCH when a vital sign is low, else READ
the strategy, DONE), so the validation loss has something to learn. Settings are ``default_settings``
for the base (the AutoMem paper's configuration scaled to its width), with the step budget capped by
``--steps``.

The ceiling beside it is a plain loop of transformers + peft on the same base, LoRA, examples (the
same chat template, prompt tokens masked) and optimizer steps of ``batch_size`` examples: AdamW over
the LoRA weights, no checkpointing, no validation, no checkpoints, bf16 weights and autocast where the
GPU computes bf16 natively. On a GPU a step is one padded forward of the whole batch; on the CPU one
sequence per forward (a padded batch sends torch's CPU attention to the math path, about 10 GB for the
embedded base at 4 x 400 tokens). Both report the trainer's figures: ``train_s_per_step`` the median
optimizer step after the first, the device synchronised, and tokens per second the non-padding tokens
of those steps over their time; the ratio is the project's tokens/s over the ceiling's.
Peak RSS is this process's high-water mark (``getrusage``), model loading included.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

from automem_dagster.memory.ops import OP_SYNTAX, OpName
from benchmarks.common import emit, parser, start_result, table, target

NAME = "training_throughput"
FULL = {"examples": 96, "episodes": 16, "steps": 12, "seed": 0, "batch": None}
QUICK = {"examples": 12, "episodes": 6, "steps": 2, "seed": 0, "batch": 2}
RSS_LIMIT_MB = 4096

_OBJECTS = ("tree", "water", "stone", "coal", "iron", "grass", "sand", "cow", "zombie", "skeleton", "table", "furnace")
_DIRECTIONS = ("north", "south", "east", "west", "north-east", "north-west", "south-east", "south-west")
_ACTIONS = ("move_left", "move_right", "move_up", "move_down", "do", "noop", "place_table", "make_wood_pickaxe", "sleep")
_VITALS = ("health", "food", "drink", "energy")
_FILES = ("map_notes.txt", "crafting_progress.txt", "survival_log.txt", "actions_log.txt", "strategy.txt")
_SYSTEM = (
    "You keep the memory of an agent playing Crafter. LOG phase: record what the previous action led to (the map, "
    "one line per object; low vital signs; the action's outcome), only what is new, then <|DONE|>. PLAN phase: "
    "consult memory read-only (search the map for what a low vital sign needs, else read the strategy), then "
    "<|DONE|>.\nMemory operations, one per line:\n"
    + "\n".join(OP_SYNTAX[op].split("  ")[0] for op in (OpName.READ, OpName.SEARCH, OpName.APPEND, OpName.UPSERT,
                                                        OpName.DONE))
)
_NEEDS = {"drink": "water", "food": "cow", "energy": "sleep", "health": "zombie"}


def _episode_rows(episode: str, seed: int, steps: int, rng: random.Random) -> list[dict[str, Any]]:
    rows, history = [], []
    lines = {name: rng.randint(0, 12) for name in _FILES}
    vitals = {v: rng.randint(5, 9) for v in _VITALS}
    inventory = {"wood": 0, "sapling": 0, "stone": 0}
    for step in range(steps):
        action = rng.choice(_ACTIONS)
        reward = 1.0 if rng.random() < 0.1 else 0.0
        for v in _VITALS:
            vitals[v] = max(0, min(9, vitals[v] + rng.choice((-1, 0, 0, 1))))
        if action == "do" and rng.random() < 0.5:
            inventory[rng.choice(list(inventory))] += 1
        seen = rng.sample(_OBJECTS, 4)
        where = {o: (rng.randint(1, 6), rng.choice(_DIRECTIONS)) for o in seen}
        observation = (
            "You see: " + ", ".join(f"{o} {d} steps to your {w}" for o, (d, w) in where.items()) + ".\n"
            f"You face {rng.choice(('grass', 'tree', 'water', 'stone', 'sand'))}.\n"
            "Status: " + ", ".join(f"{v} {vitals[v]}/9" for v in _VITALS) + ".\n"
            "Inventory: " + (", ".join(f"{k} {n}" for k, n in inventory.items() if n) or "empty") + "."
        )
        index = "\n".join(f"{name} ({lines[name]} lines)" for name in _FILES)
        recent = ", ".join(f"{a} ({r:+g})" if r else a for a, r in history[-5:]) or "none"
        low = [v for v in _VITALS if vitals[v] <= 3]
        for phase in ("log", "plan"):
            head = f"Memory files:\n{index}\n\nRecent actions: {recent}\n\n"
            if phase == "log":
                user = (head + f"Step {step}. Your previous action was {action} (reward {reward:+g}). Now:\n\n"
                        f"{observation}\n\nPhase: LOG. Record what your previous action led to, then <|DONE|>.")
                ops = [f"<|UPSERT|>map_notes.txt|{o}|{d} steps {w} at step {step}" for o, (d, w) in where.items()]
                ops += [f"<|UPSERT|>survival_log.txt|{v}|{vitals[v]}/9 at step {step}" for v in low]
                ops.append(f"<|APPEND|>actions_log.txt|step {step}: {action} -> reward {reward:+g}")
            else:
                user = (head + f"Step {step}. Now:\n\n{observation}\n\nPhase: PLAN. Read memory if useful, then "
                        "<|DONE|>.")
                ops = [f"<|SEARCH|>map_notes.txt|{_NEEDS[v]}" for v in low[:1]] or ["<|READ|>strategy.txt"]
            ops.append("<|DONE|>")
            rows.append({"prompt": [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}],
                         "completion": [{"role": "assistant", "content": "\n".join(ops)}],
                         "episode": episode, "seed": seed, "step": step, "phase": phase, "turn": 0,
                         "score": round(rng.random(), 3)})
        history.append((action, reward))
        lines["actions_log.txt"] += 1
    return rows


def synthetic_dataset(out_dir: Path, examples: int, episodes: int, seed: int = 0) -> dict[str, Any]:
    """Write ``out_dir/dataset.parquet`` with ``examples`` rows (LOG and PLAN turns) over ``episodes``
    episodes, the curation step's format; returns counts and mean prompt/completion characters."""
    import pandas as pd

    rng = random.Random(seed)
    episodes = max(1, min(episodes, examples))
    rows: list[dict[str, Any]] = []
    for e in range(episodes):
        n = examples // episodes + (e < examples % episodes)  # rows of this episode, two turns per step
        rows += _episode_rows(f"crafter__seed{1000 + e}", 1000 + e, -(-n // 2), rng)[:n]
    out_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(out_dir / "dataset.parquet")
    return {
        "examples": len(rows),
        "episodes": len({r["episode"] for r in rows}),
        "phases": {p: sum(r["phase"] == p for r in rows) for p in ("log", "plan")},
        "prompt_chars_mean": sum(sum(len(m["content"]) for m in r["prompt"]) for r in rows) / len(rows),
        "completion_chars_mean": sum(len(r["completion"][0]["content"]) for r in rows) / len(rows),
    }


def _tokenized(tokenizer, row: dict[str, Any], max_length: int):
    """(input ids, labels) of one example as the trainer sees it: its chat template, prompt tokens masked."""
    import torch

    prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=False)
    full = tokenizer.apply_chat_template(row["prompt"] + row["completion"], return_dict=False)[:max_length]
    ids = torch.tensor(full)
    labels = ids.clone()
    labels[:len(prompt)] = -100
    return ids, labels


def plain_ceiling(rows: list[dict[str, Any]], settings, base: str, steps: int, seed: int) -> dict[str, Any]:
    """The same LoRA on the same examples in a plain transformers + peft loop (the module doc): its median
    step after the first and the tokens per second of those steps."""
    import statistics
    import time

    import torch
    from peft import LoraConfig, get_peft_model
    from torch.nn.functional import cross_entropy
    from torch.nn.utils.rnn import pad_sequence

    from automem_dagster.training.base_model import load_base
    from automem_dagster.training.device_plan import native_bf16
    from automem_dagster.training.sft import library_warnings_silenced

    torch.manual_seed(seed)
    model, tokenizer = load_base(base)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bf16 = native_bf16()
    if bf16:
        model.to(torch.bfloat16)
    model.config.use_cache = False
    with library_warnings_silenced():
        model = get_peft_model(model, LoraConfig(r=settings.rank, lora_alpha=settings.alpha,
                                                 lora_dropout=settings.dropout,
                                                 target_modules=list(settings.target_modules), bias="none",
                                                 task_type="CAUSAL_LM")).to(device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate)
    examples = [_tokenized(tokenizer, r, settings.max_length) for r in rows]
    micro = settings.batch_size if device.type == "cuda" else 1
    rng = random.Random(seed)
    seconds, tokens = [], []
    for _ in range(steps):
        batch = [examples[rng.randrange(len(examples))] for _ in range(settings.batch_size)]
        counted = sum(int((labels[1:] != -100).sum()) for _, labels in batch)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        for i in range(0, len(batch), micro):
            part = batch[i:i + micro]
            ids = pad_sequence([x for x, _ in part], batch_first=True, padding_value=tokenizer.pad_token_id)
            labels = pad_sequence([y for _, y in part], batch_first=True, padding_value=-100)
            mask = pad_sequence([torch.ones_like(x) for x, _ in part], batch_first=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            loss = cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten().to(device),
                                 ignore_index=-100, reduction="sum") / counted
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - began)
        tokens.append(sum(len(x) for x, _ in batch))
    warm = 1 if steps > 1 else 0
    return {"steps": steps, "micro_batch": micro, "precision": "bf16" if bf16 else "fp32",
            "gradient_checkpointing": False, "train_s_per_step": statistics.median(seconds[warm:]),
            "tokens_per_second": sum(tokens[warm:]) / sum(seconds[warm:])}


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help="optimizer steps of each side (default 12; quick 2)")
    p.add_argument("--examples", type=int, default=None, help="synthetic examples (default 96; quick 12)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: default_settings' 4; quick 2)")
    p.add_argument("--base", default="embedded", help="`embedded` or a local Hugging Face model directory")
    p.add_argument("--keep", type=Path, default=None, help="write the dataset and the run here instead of a temp dir")
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    for key in ("steps", "examples", "batch"):
        cfg[key] = getattr(args, key) or cfg[key]
    if cfg["steps"] < 1 or cfg["examples"] < 4:
        p.error("give at least 1 step and 4 examples")

    import torch

    from automem_dagster.training.base_model import configure_torch_threads, describe_base
    from automem_dagster.training.examples import load_examples, split_examples
    from automem_dagster.training.settings import default_settings
    from automem_dagster.training.sft import train_adapter

    configure_torch_threads()
    settings = default_settings(describe_base(args.base)["hidden_size"])
    if cfg["batch"]:
        settings = settings.model_copy(update={"batch_size": cfg["batch"]})
    result = start_result(NAME, args.quick, {**cfg, "base": args.base, "lora": settings.model_dump(mode="json"),
                                             "torch_threads": torch.get_num_threads()})
    with tempfile.TemporaryDirectory(prefix="training_throughput-") as tmp:
        work = args.keep or Path(tmp)
        data = synthetic_dataset(work / "dataset", cfg["examples"], cfg["episodes"], cfg["seed"])
        run = train_adapter(work / "dataset", settings, work / "run", base=args.base, max_steps=cfg["steps"],
                            eval_every=cfg["steps"], save_every=cfg["steps"], seed=cfg["seed"])
        rows = load_examples(work / "dataset")
    train = [rows[i] for i in split_examples([r["episode"] for r in rows], run.validation_fraction, cfg["seed"]).train]
    ceiling = plain_ceiling(train, settings, args.base, cfg["steps"], cfg["seed"])
    fell = (run.final_validation_loss - run.initial_validation_loss
            if run.final_validation_loss is not None and run.initial_validation_loss is not None else None)
    ratio = run.tokens_per_second / ceiling["tokens_per_second"] if run.tokens_per_second else None
    result["results"] = {
        "dataset": data,
        "examples_train": run.examples_train,
        "examples_validation": run.examples_validation,
        "steps": run.steps_this_run,
        "train_s_per_step": run.train_s_per_step,
        "validation_s_per_pass": run.validation_s_per_pass,
        "validation_passes": run.validation_passes,
        "tokens_per_second": run.tokens_per_second,
        "tokens_per_example_mean": run.tokens_trained / (run.global_step * settings.batch_size) if run.global_step else None,
        "wall_s": run.wall_s,
        "peak_rss_mb": run.peak_rss_mb,
        "peak_device_memory_mb": run.peak_device_memory_mb,
        "validation_loss_before": run.initial_validation_loss,
        "validation_loss_after": run.final_validation_loss,
        "validation_loss_change": fell,
        "train_loss": run.train_loss,
        "device": run.device,
        "device_name": run.device_name,
        "trained_on": {k: getattr(run, k) for k in ("precision", "micro_batch", "gradient_accumulation",
                                                     "gradient_checkpointing", "padding_free")},
        "ceiling": ceiling,
        "project_over_ceiling": ratio,
    }
    result["targets"] = [target("peak RSS of the training process", run.peak_rss_mb, RSS_LIMIT_MB, "<", unit="MB",
                                note="model loading and the ceiling's loop included")]
    if not args.quick:  # a few quick steps under warmup need not move the loss
        result["targets"].append(target("validation loss after minus before", fell, 0.0, "<", source="proposed",
                                        note=f"{cfg['steps']} steps of default_settings on rule-following completions"))
    if run.device.startswith("cuda"):
        result["targets"].append(target("project tokens/s over plain transformers + peft", ratio, 0.5, ">=",
                                        note="on an H200-class GPU at the dataset's sizes"))
    r = result["results"]
    emit(result, args.out, [table(
        f"LoRA SFT on the {args.base} base (rank {settings.rank}, batch {settings.batch_size}, {r['steps']} steps), "
        f"{r['device_name']}",
        ["stage", "micro-batch", "precision", "train_s_per_step", "tokens/s", "project/ceiling", "peak RSS MB",
         "val loss before", "val loss after"],
        [["project (trl SFTTrainer)", f"{run.micro_batch} x {run.gradient_accumulation}", run.precision,
          r["train_s_per_step"], r["tokens_per_second"], ratio, r["peak_rss_mb"], r["validation_loss_before"],
          r["validation_loss_after"]],
         ["plain transformers + peft", f"{ceiling['micro_batch']} x {settings.batch_size // ceiling['micro_batch']}",
          ceiling["precision"], ceiling["train_s_per_step"], ceiling["tokens_per_second"], 1.0, None, None, None]])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
