"""Concurrency: episodes per minute against the embedded server with 1, 2 and 4 parallel slots.

Each setting starts the embedded model with ``embedded_parallel`` slots and plays the same
short Crafter episodes (the memory agent, scaffold v0, seeds 42, 43, ...) through the
project's runner with rollout concurrency equal to the slots. Setting 1 (one slot, one
episode at a time) is the sequential reference; the speed-up of a setting is its episodes per
minute over the reference's, all measured in one run. Only one server runs at a time: each
setting's server is stopped before the next one starts, and its start is timed apart from the
batch.

Settings run in the order given; with ``--rounds 2`` or more the order reverses every round
(1, 2, 4, 4, 2, 1) so that a drift in the machine's load falls on every setting alike, at the
price of a longer run. Episodes are short (default 4 episodes of 5 steps per setting) so the
whole run stays under 10 minutes; steps per minute are reported beside episodes per minute in
case an episode ends early, and tokens per step show that the settings did comparable work.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from automem_dagster.llm.config import load_endpoints
from automem_dagster.paths import DEFAULT_ENDPOINTS
from automem_dagster.rollout import RolloutSpec
from benchmarks.common import (
    batch_episodes,
    cost_figures,
    emit,
    load_scaffold_ref,
    machine_info,
    parser,
    ratio,
    run_batches,
    start_result,
    step_tokens,
    table,
    target,
)

NAME = "concurrency"
GAME = "crafter"
FULL = {"slots": (1, 2, 4), "episodes": 4, "max_steps": 5, "rounds": 1}
QUICK = {"slots": (1, 2), "episodes": 2, "max_steps": 1, "rounds": 1}
FIRST_SEED = 42
SPEEDUP_LIMIT = 1.0
"""Proposed: parallel slots never make rollouts slower than sequential episodes."""


def schedule(slots: list[int], rounds: int) -> list[tuple[int, int]]:
    """(round, slots) in play order: the given order, reversed every other round."""
    return [(r, n) for r in range(rounds) for n in (slots if r % 2 == 0 else slots[::-1])]


def setting_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One setting over its rounds: ``runs`` hold each round's ``episodes`` (step records), ``elapsed_s``,
    ``connect_s`` and the load around it."""
    episodes = [ep for run in runs for ep in run["episodes"]]
    elapsed = sum(run["elapsed_s"] for run in runs)
    cost = cost_figures(episodes)
    tokens = sum(sum(step_tokens(s)) for ep in episodes for s in ep)
    return {
        "rounds": len(runs),
        "episodes": cost["episodes"],
        "steps": cost["steps"],
        "elapsed_s": elapsed,
        "episodes_per_min": ratio(cost["episodes"] * 60, elapsed),
        "steps_per_min": ratio(cost["steps"] * 60, elapsed),
        "tokens_per_s": ratio(tokens, elapsed),
        "server_start_s": [run["connect_s"] for run in runs],
        "load_average_1_5_15": [{"before": run["load_before"], "after": run["load_after"]} for run in runs],
        "model_calls_per_step": cost["model_calls_per_step"],
        "input_tokens_per_step": cost["input_tokens_per_step"]["mean"],
        "uncached_input_tokens_per_step": cost["uncached_input_tokens_per_step"]["mean"],
        "output_tokens_per_step": cost["output_tokens_per_step"]["mean"],
        "wall_s_per_step_median": cost["wall_s_per_step"]["median"],
        "valid_action_rate": cost["valid_action_rate"],
    }


def speedups(per_slots: dict[int, dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Each setting's episodes per minute, steps per minute and tokens per second over the sequential
    setting's (1 slot). Short episodes differ in how many model calls they make; the tokens ratio
    compares the work done rather than the episodes finished."""
    ref = per_slots[1]
    return {n: {key: ratio(f[key], ref[key]) for key in ("episodes_per_min", "steps_per_min", "tokens_per_s")}
            for n, f in per_slots.items()}


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--slots", default=None, help="comma-separated parallel slots, 1 included (default 1,2,4; quick 1,2)")
    p.add_argument("--episodes", type=int, default=None,
                   help=f"episodes per setting (default {FULL['episodes']}, quick {QUICK['episodes']})")
    p.add_argument("--max-steps", type=int, default=None,
                   help=f"steps per episode (default {FULL['max_steps']}, quick {QUICK['max_steps']})")
    p.add_argument("--rounds", type=int, default=None, help="play every setting this many times, order reversed each round")
    p.add_argument("--scaffold", default="v0", help="scaffold version v<N> or a YAML file (default v0)")
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: the embedded model)")
    args = p.parse_args(argv)
    base = QUICK if args.quick else FULL
    slots = [int(x) for x in args.slots.split(",")] if args.slots else list(base["slots"])
    if 1 not in slots or any(n < 1 for n in slots) or len(set(slots)) != len(slots):
        p.error(f"--slots {args.slots}: distinct positive numbers, 1 (the sequential reference) among them")
    config = load_endpoints(args.endpoints)
    settings = {
        "game": GAME,
        "scaffold": args.scaffold,
        "slots": slots,
        "concurrency": "equal to slots",
        "episodes": args.episodes or base["episodes"],
        "max_steps": args.max_steps or base["max_steps"],
        "rounds": args.rounds or base["rounds"],
        "first_seed": FIRST_SEED,
        "endpoints": str(args.endpoints),
        "game_model": config.game.model,
        "embedded": config.uses_embedded(),
        "embedded_ctx_per_slot": config.embedded_ctx_per_slot,
    }
    if not config.uses_embedded():
        settings["note"] = "no embedded endpoint: the slots only set the rollout concurrency"
    result = start_result(NAME, args.quick, settings)
    scaffold = load_scaffold_ref(GAME, args.scaffold)
    seeds = list(range(FIRST_SEED, FIRST_SEED + settings["episodes"]))
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in slots}
    order = schedule(slots, settings["rounds"])
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp:
        work = Path(tmp)
        for r, n in order:
            batch = work / f"round{r}-slots{n}"
            spec = RolloutSpec(GAME, scaffold, seeds, settings["max_steps"], batch, concurrency=n)
            before = machine_info()["load_average_1_5_15"]
            played = run_batches([spec], config.model_copy(update={"embedded_parallel": n}), work / "logs")
            runs[n].append({"episodes": batch_episodes(batch), "elapsed_s": played["elapsed_s"][0],
                            "connect_s": played["connect_s"], "load_before": before,
                            "load_after": machine_info()["load_average_1_5_15"]})
    per_slots = {n: setting_figures(runs[n]) for n in slots}
    for n, s in speedups(per_slots).items():
        per_slots[n]["speedup_over_sequential"] = s
    settings["order"] = [n for _, n in order]
    result["results"] = {"by_slots": {str(n): f for n, f in per_slots.items()}}
    result["targets"] = _targets(per_slots)
    emit(result, args.out, _tables(result))
    return 0


def _targets(per_slots: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each setting against one slot (the issue's for 2 slots), and 4 slots against 2."""
    out = [target(f"{n} slots: episodes per minute over sequential (1 slot)", f["speedup_over_sequential"]["episodes_per_min"],
                  SPEEDUP_LIMIT, ">=", unit="x", source="issue" if n == 2 else "proposed")
           for n, f in per_slots.items() if n != 1]
    if 2 in per_slots and 4 in per_slots:
        out.append(target("4 slots: episodes per minute over 2 slots",
                          ratio(per_slots[4]["episodes_per_min"], per_slots[2]["episodes_per_min"]), SPEEDUP_LIMIT, ">=",
                          unit="x", source="issue"))
    return out


def _tables(result: dict[str, Any]) -> list:
    rows = [[n, f["episodes"], f["steps"], f["elapsed_s"], f["episodes_per_min"], f["steps_per_min"],
             f["speedup_over_sequential"]["episodes_per_min"], f["speedup_over_sequential"]["tokens_per_s"],
             f["wall_s_per_step_median"], f["input_tokens_per_step"], f["uncached_input_tokens_per_step"],
             f["output_tokens_per_step"], f["tokens_per_s"],
             max(f["server_start_s"])]
            for n, f in result["results"]["by_slots"].items()]
    s = result["settings"]
    return [table(f"{s['game']}, {s['episodes']} episodes x {s['max_steps']} steps per setting, {s['rounds']} round(s), "
                  f"order {s['order']}",
                  ["slots", "episodes", "steps", "batch s", "eps/min", "steps/min", "speed-up", "speed-up tok/s",
                   "wall s/step median", "in tok/step", "uncached in/step", "out tok/step", "tok/s", "server start s"], rows)]


if __name__ == "__main__":
    raise SystemExit(main())
