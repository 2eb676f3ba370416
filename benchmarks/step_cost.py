"""Step cost: what one step of the memory agent costs with the embedded model on Crafter.

Real rollouts of the memory agent (scaffold v0 by default) are played through the project's
own runner (``run_batch`` inside ``connect``, which starts the embedded model named by
``assets/endpoints/embedded.yaml``). Every figure comes from the trajectory files' step
records: ``wall_s`` (the whole step), each model call's ``input_tokens`` and ``output_tokens``
(a step is its LOG turns plus its PLAN turns, so tokens per step are the sum over the step's
calls; per call figures are reported beside them) and ``action_valid``.

Uncached input tokens per step are the input tokens less those the server reports it took from
its prompt cache (``cached_tokens`` of each call in the trajectory: llama.cpp's ``timings.cache_n``,
OpenAI's and vLLM's ``prompt_tokens_details.cached_tokens``). MiniHack Corridor-R3 and NetHack
are played with the same settings and reported beside Crafter, without targets.

Episodes run one at a time by default (``--concurrency 1``), so a step's wall time is that
step's own and not shared with another episode; the load average at the start is recorded,
since wall times on a shared machine depend on it and token counts do not. Besides the targets, the benchmark fits how
per-step input tokens grow with the step index (the rule of ``benchmarks.common.GROWTH_RULE``)
and draws the tokens of every step over the episode as a PNG.

``--reference`` plays the settings on which this harness was measured against AutoMem's own v0
harness (issue 29): Crafter seeds 42 and 43, 20 steps, temperature 0, the game role's
``max_tokens`` 160, nothing beside. Its targets are that harness's figures on those settings
(``REFERENCE_*``: 1.95 calls and 2,210 input tokens per step), every action valid, and memory
work still done: writes made by LOG calls and reads made by consultation calls (``memory_work``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from automem_dagster.llm.config import load_endpoints
from automem_dagster.paths import DEFAULT_ENDPOINTS, PROJECT_ROOT
from automem_dagster.plots import save_figure as save_png
from automem_dagster.rollout import RolloutSpec
from benchmarks.common import (
    GROWTH_RULE,
    batch_episodes,
    by_step_index,
    cost_figures,
    emit,
    growth,
    growth_targets,
    index_means,
    load_scaffold_ref,
    parser,
    phases_text,
    run_batches,
    start_result,
    step_tokens,
    table,
    target,
)

NAME = "step_cost"
GAME = "crafter"
FULL = {"episodes": 2, "max_steps": 40}
QUICK = {"episodes": 1, "max_steps": 4}
FIRST_SEED = 42
BESIDE = ("minihack:Corridor-R3", "nethack")
WALL_S_LIMIT = 1.2
CALLS_LIMIT = 2.5
INPUT_TOKENS_LIMIT = 2_500
UNCACHED_TOKENS_LIMIT = 800
OUTPUT_TOKENS_LIMIT = 40
VALID_ACTION_LIMIT = 1.0
MALFORMED_BEFORE = 0.0
"""Malformed turns per step of the harness before this one on the same benchmark (no rise allowed)."""
REFERENCE = {"episodes": 2, "max_steps": 20, "temperature": 0.0, "max_tokens": 160}
"""The reference settings (issue 29): one fresh server, seeds 42-43 x 20 steps, greedy, a 160-token cap."""
REFERENCE_CALLS = 1.95
REFERENCE_INPUT_TOKENS = 2_210
"""AutoMem's own v0 harness on the reference settings: model calls and input tokens per step."""
PLOT_NAME = f"{GAME}_tokens_per_step.png"
DOCS_IMAGES = PROJECT_ROOT / "docs" / "images"


def step_series(episodes: list[list[dict[str, Any]]]) -> dict[str, list[list[float]]]:
    """Input and output tokens of every step, grouped by step index (one value per episode)."""
    return {"input": by_step_index(episodes, lambda s: step_tokens(s)[0]),
            "output": by_step_index(episodes, lambda s: step_tokens(s)[1])}


def plot_tokens_per_step(episodes: list[list[dict[str, Any]]], title: str, out: Path) -> Path:
    """Input tokens (top) and output tokens (bottom) of every step against its index: one thin line per
    episode, the mean over episodes in bold, the targets dashed."""
    series = step_series(episodes)
    fig = Figure(figsize=(8, 5.5), layout="constrained")
    fig.suptitle(title)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for ax, key, limit, colour, label in ((top, "input", INPUT_TOKENS_LIMIT, "#1f77b4", "input tokens per step"),
                                          (bottom, "output", OUTPUT_TOKENS_LIMIT, "#ff7f0e", "output tokens per step")):
        for ep in episodes:
            values = [step_tokens(s)[0 if key == "input" else 1] for s in ep]
            ax.plot(range(len(values)), values, color=colour, alpha=0.3, linewidth=1)
        means = index_means(series[key])
        ax.plot(range(len(means)), means, color=colour, linewidth=2.2, marker="o", markersize=3,
                label=f"mean over {len(episodes)} episode{'s' if len(episodes) != 1 else ''}")
        ax.axhline(limit, color="#d62728", linestyle="--", linewidth=1.2, label=f"target <= {limit:,}")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0, top=max(max(means, default=0), limit) * 1.15)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel("step index in the episode")
    return save_png(fig, out)


def plot_path(quick: bool, out: Path | None, explicit: Path | None) -> Path:
    """docs/images for a full run; beside --out (or in the temp folder) for a quick one, which means little."""
    if explicit is not None:
        return explicit
    if not quick:
        return DOCS_IMAGES / PLOT_NAME
    name = PLOT_NAME.replace(".png", "_quick.png")
    return (out.parent if out is not None else Path(tempfile.gettempdir())) / name


def beside_specs(games: list[str], seeds: list[int], max_steps: int, work: Path, concurrency: int) -> list[RolloutSpec]:
    """The games reported beside Crafter, each with its v0 scaffold, in a folder of its own."""
    return [RolloutSpec(g, load_scaffold_ref(g, "v0"), seeds, max_steps, work / g.replace(":", "-"), concurrency)
            for g in games]


def memory_work(episodes: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """The memory operations the model made in a batch: writes in LOG calls (``ok`` ones, and those that
    changed a file), reads in consultation calls (``plan`` turns), and the steps that showed an
    earlier consultation again without a call (``memory_context.reused_consultation``)."""
    steps = [s for ep in episodes for s in ep]
    turns = [t for s in steps for t in s["turns"]]
    log_ops = [o for t in turns if t["phase"] == "log" for o in t["ops"]]
    return {
        "log_calls": sum(t["phase"] == "log" for t in turns),
        "writes": sum(bool(o["ok"]) for o in log_ops),
        "writes_changed": sum(bool(o.get("changed")) for o in log_ops),
        "reads": sum(bool(o["ok"]) for t in turns if t["phase"] == "plan" for o in t["ops"]),
        "consultations": sum(bool(t["ops"]) for t in turns if t["phase"] == "plan"),
        "reused_consultations": sum("reused_consultation" in (s.get("memory_context") or {}) for s in steps),
    }


def reference_config(config):
    """The endpoints with the reference sampling on the game role: temperature 0 and ``max_tokens`` 160."""
    game = config.game.model_copy(update={"temperature": REFERENCE["temperature"], "max_tokens": REFERENCE["max_tokens"]})
    return config.model_copy(update={"game": game})


def _settings(args, config) -> dict[str, Any]:
    base = REFERENCE if args.reference else QUICK if args.quick else FULL
    return {
        "reference": args.reference,
        "temperature": config.game.temperature,
        "game_max_tokens": config.game.max_tokens,
        "game": GAME,
        "scaffold": args.scaffold,
        "episodes": args.episodes or base["episodes"],
        "max_steps": args.max_steps or base["max_steps"],
        "concurrency": args.concurrency,
        "first_seed": FIRST_SEED,
        "endpoints": str(args.endpoints),
        "game_model": config.game.model,
        "embedded": config.uses_embedded(),
        "embedded_parallel": config.embedded_parallel if config.uses_embedded() else None,
        "load_average_at_start": os.getloadavg()[0],
        "beside": [g for g in args.beside.split(",") if g],
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=None, help=f"episodes (default {FULL['episodes']}, quick {QUICK['episodes']})")
    p.add_argument("--max-steps", type=int, default=None,
                   help=f"steps per episode (default {FULL['max_steps']}, quick {QUICK['max_steps']})")
    p.add_argument("--concurrency", type=int, default=1,
                   help="episodes played at once (default 1: a step's wall time is its own)")
    p.add_argument("--scaffold", default="v0", help="scaffold version v<N> or a YAML file (default v0)")
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: the embedded model)")
    p.add_argument("--plot", type=Path, default=None,
                   help=f"where the PNG goes (default docs/images/{PLOT_NAME}; with --quick beside --out or in the temp folder)")
    p.add_argument("--keep", type=Path, default=None, help="keep the batch (trajectories, memory) in this directory")
    p.add_argument("--beside", default=",".join(BESIDE),
                   help="games played with the same settings and reported beside Crafter without targets "
                        "(comma-separated; empty for none)")
    p.add_argument("--beside-steps", type=int, default=None, help="steps per episode of the games beside (default: as Crafter)")
    p.add_argument("--reference", action="store_true",
                   help="the reference settings (seeds 42-43 x 20 steps, temperature 0, game max_tokens 160, "
                        "nothing beside) with the reference harness's figures as targets")
    args = p.parse_args(argv)
    if args.reference:
        if args.quick or args.episodes or args.max_steps:
            p.error("--reference fixes episodes and steps; leave out --quick, --episodes and --max-steps")
        args.beside = ""
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        p.error(f"--keep {args.keep} is not empty: a batch there would resume instead of running; give a new directory")
    config = load_endpoints(args.endpoints)
    if args.reference:
        config = reference_config(config)
    settings = _settings(args, config)
    result = start_result(NAME, args.quick, settings)
    scaffold = load_scaffold_ref(GAME, args.scaffold)
    with tempfile.TemporaryDirectory(prefix="bench-step-cost-") as tmp:
        work = args.keep or Path(tmp)
        batch = work / "batch"
        seeds = list(range(FIRST_SEED, FIRST_SEED + settings["episodes"]))
        spec = RolloutSpec(GAME, scaffold, seeds, settings["max_steps"], batch, args.concurrency)
        beside = beside_specs(settings["beside"], seeds, args.beside_steps or settings["max_steps"], work, args.concurrency)
        played = run_batches([spec, *beside], config, work / "logs")
        episodes = batch_episodes(batch)
        result["beside"] = {s.game: _brief(cost_figures(batch_episodes(s.out_dir))) for s in beside}
        figures = cost_figures(episodes)
        figures["memory_work"] = memory_work(episodes)
        series = step_series(episodes)
        figures["connect_s"] = played["connect_s"]
        figures["batch_elapsed_s"] = played["elapsed_s"][0]
        figures["input_growth_per_step"] = growth(series["input"])
        figures["input_growth_per_call"] = growth(by_step_index(
            episodes, lambda s: step_tokens(s)[0] / len(s["turns"]) if s["turns"] else 0.0))
        figures["mean_by_step_index"] = {"input_tokens": index_means(series["input"]),
                                         "output_tokens": index_means(series["output"]),
                                         "episodes_at_index": [len(v) for v in series["input"]]}
        png = plot_tokens_per_step(
            episodes, f"{GAME}, memory agent (scaffold {args.scaffold}), {config.game.model}: tokens per step",
            plot_path(args.quick, args.out, args.plot))
        figures["plot"] = str(png)
    result["results"] = figures
    result["growth_rule"] = GROWTH_RULE
    result["targets"] = _reference_targets(figures) if args.reference else _targets(figures)
    emit(result, args.out, _tables(result))
    return 0


BRIEF = ("model_calls_per_step", "input_tokens_per_step", "uncached_input_tokens_per_step", "output_tokens_per_step",
         "wall_s_per_step", "valid_action_rate", "malformed_turns_per_step", "calls_per_step_by_phase", "steps")


def _brief(f: dict[str, Any]) -> dict[str, Any]:
    """The figures reported for a game beside Crafter: means and medians, no targets."""
    return {k: (f[k]["mean"] if k.endswith("tokens_per_step") else f[k]["median"] if k == "wall_s_per_step" else f[k])
            for k in BRIEF}


def _targets(f: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        target("model calls per step (mean)", f["model_calls_per_step"], CALLS_LIMIT, "<=", unit="calls"),
        target("median wall time per step", f["wall_s_per_step"]["median"], WALL_S_LIMIT, "<=", unit="s"),
        target("input tokens per step (mean, LOG + PLAN calls)", f["input_tokens_per_step"]["mean"], INPUT_TOKENS_LIMIT,
               "<=", unit="tokens"),
        target("uncached input tokens per step (mean, as the server reports its cache)",
               f["uncached_input_tokens_per_step"]["mean"], UNCACHED_TOKENS_LIMIT, "<=", unit="tokens"),
        *growth_targets("flat as the episode grows", f["input_growth_per_step"]),
        target("output tokens per step (mean, LOG + PLAN calls)", f["output_tokens_per_step"]["mean"], OUTPUT_TOKENS_LIMIT,
               "<=", unit="tokens"),
        target("valid-action rate", f["valid_action_rate"], VALID_ACTION_LIMIT, ">=", unit="share"),
        target("malformed turns per step (no rise)", f["malformed_turns_per_step"], MALFORMED_BEFORE, "<=", unit="turns"),
    ]


def _reference_targets(f: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 29: cheaper than the reference harness on its settings, every action valid, memory still worked."""
    work, note = f["memory_work"], "AutoMem's v0 harness on the same settings"
    return [
        target("model calls per step (mean)", f["model_calls_per_step"], REFERENCE_CALLS, "<=", unit="calls", note=note),
        target("input tokens per step (mean)", f["input_tokens_per_step"]["mean"], REFERENCE_INPUT_TOKENS, "<=",
               unit="tokens", note=note),
        target("valid-action rate", f["valid_action_rate"], VALID_ACTION_LIMIT, ">=", unit="share"),
        target("memory writes made in LOG calls", work["writes"], 0, ">", unit="ops"),
        target("memory reads made in consultation calls", work["reads"], 0, ">", unit="ops"),
    ]


def _tables(result: dict[str, Any]) -> list:
    f = result["results"]
    rows = [[kind, f[f"{kind}_tokens_per_step"]["mean"], f[f"{kind}_tokens_per_step"]["median"],
             f[f"{kind}_tokens_per_step"]["p95"], f[f"{kind}_tokens_per_call"]["mean"]]
            for kind in ("input", "output")]
    u = f["uncached_input_tokens_per_step"]
    rows.append(["uncached input", u["mean"], u["median"], u["p95"], u["mean"] / f["model_calls_per_step"]])
    g = f["input_growth_per_step"]
    return [
        table(f"{result['settings']['game']}: {f['steps']} steps in {f['episodes']} episodes, "
              f"{f['model_calls_per_step']:.2f} calls per step ({phases_text(f['calls_per_step_by_phase'])})",
              ["tokens", "per step mean", "median", "p95", "per call mean"], rows),
        table("per step", ["wall s median", "wall s mean", "model s mean", "valid actions", "tokens per episode",
                           "input slope * steps / mean", "input last / first quarter"],
              [[f["wall_s_per_step"]["median"], f["wall_s_per_step"]["mean"], f["model_s_per_step"]["mean"],
                f["valid_action_rate"], f["total_tokens_per_episode"]["mean"], g["slope_times_steps_over_mean"],
                g["last_over_first_quarter"]]]),
        table("beside (same settings, no targets)", ["game", "calls/step", "input/step", "uncached/step", "output/step",
                                                     "wall s median", "valid actions", "malformed/step"],
              [[g, b["model_calls_per_step"], b["input_tokens_per_step"], b["uncached_input_tokens_per_step"],
                b["output_tokens_per_step"], b["wall_s_per_step"], b["valid_action_rate"], b["malformed_turns_per_step"]]
               for g, b in result.get("beside", {}).items()]),
        table("memory work (ops the model made)", list(f["memory_work"]), [list(f["memory_work"].values())]),
        table("plot", ["file"], [[f["plot"]]]),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
