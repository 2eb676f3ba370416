"""Common random numbers: how much seeded sampling narrows a paired comparison.

Two agents A and B (the window baseline with history ``--window-a`` and ``--window-b``) play
the same game seeds on the embedded model at ``--temperature``. B plays twice: once with the
sampling seeds A used (every request seeded from (episode seed, step, phase, turn), as the
agents do) and once with independent ones (its episode's sampling seed shifted). The paired
comparison A vs B is computed for both, and the result reports

    narrowing = SE of the paired differences with independent noise / SE with shared noise,

together with the share of steps where A and B chose the same action (shared noise makes two
similar agents decide alike, which is what cancels in the paired difference). A is played once
and reused in both comparisons, so the comparison differs only in B's sampling noise.

The per-episode score is BALROG progression (the gate's) and, beside it, the total reward,
which varies over short episodes where progression often does not.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from automem_dagster.agent.baselines import WindowAgent
from automem_dagster.games import game_family, make_game
from automem_dagster.llm import EndpointConfig, LLMClient, embedded_server
from automem_dagster.metrics.paired import compare_paired
from benchmarks.common import emit, parser, ratio, start_result, table, target

INDEPENDENT_OFFSET = 1_000_003
"""Added to B's sampling seed in the independent condition (the game seed stays the same)."""


async def play(client: LLMClient, game_name: str, seed: int, sampling_seed: int, window: int,
               max_steps: int) -> dict[str, Any]:
    """One episode of the window agent; actions, progression and total reward."""
    game = make_game(game_name, max_steps=max_steps)
    agent = WindowAgent(game_family(game_name), game.actions(), game.parse_action, client, window,
                        episode_seed=sampling_seed)
    result, actions, reward = game.reset(seed), [], 0.0
    try:
        for step in range(max_steps):
            outcome = await agent.step(step, result.observation)
            result = game.step(outcome.action)
            agent.record_outcome(outcome.action, result.reward)
            actions.append(outcome.action)
            reward += result.reward
            if result.done:
                break
    finally:
        game.close()
    return {"actions": actions, "progression": result.progression, "reward": reward}


def agreement(a: list[dict], b: list[dict]) -> float:
    """Share of steps (over all episodes) where the two agents took the same action."""
    same = total = 0
    for x, y in zip(a, b, strict=True):
        n = min(len(x["actions"]), len(y["actions"]))
        same += sum(p == q for p, q in zip(x["actions"][:n], y["actions"][:n], strict=True))
        total += n
    return same / total if total else 0.0


def paired_se(a: list[dict], b: list[dict], seeds: list[int], key: str) -> float:
    """SE of the per-seed differences (percent for progression, reward points x 100 otherwise)."""
    if key == "progression":
        return compare_paired({s: x[key] for s, x in zip(seeds, a, strict=True)},
                              {s: y[key] for s, y in zip(seeds, b, strict=True)}, n_resamples=10).stderr_difference
    d = np.array([x[key] - y[key] for x, y in zip(a, b, strict=True)])
    return float(100.0 * d.std() / np.sqrt(len(d)))


async def measure(base_url: str, args) -> dict[str, list[dict]]:
    # The prompt cache stays on (the default): far faster, and a rare last-bit difference in the
    # logits only weakens the shared noise, so the narrowing measured is if anything understated.
    config = EndpointConfig(name="game", base_url=base_url, server="llama.cpp", constrained="gbnf", temperature=args.temperature)
    client = LLMClient(config, base_url)
    runs: dict[str, list[dict]] = {"a": [], "b_shared": [], "b_independent": []}
    try:
        for seed in args.seed_list:
            runs["a"].append(await play(client, args.game, seed, seed, args.window_a, args.max_steps))
            runs["b_shared"].append(await play(client, args.game, seed, seed, args.window_b, args.max_steps))
            runs["b_independent"].append(await play(client, args.game, seed, seed + INDEPENDENT_OFFSET,
                                                    args.window_b, args.max_steps))
    finally:
        await client.close()
    return runs


def main(argv: list[str] | None = None) -> int:
    p = parser("crn_narrowing", __doc__.splitlines()[0])
    p.add_argument("--game", default="crafter")
    p.add_argument("--seeds", type=int, default=6, help="game seeds 42, 43, ... (default 6)")
    p.add_argument("--max-steps", type=int, default=25)
    p.add_argument("--window-a", type=int, default=2)
    p.add_argument("--window-b", type=int, default=3)
    p.add_argument("--temperature", type=float, default=1.0)
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.max_steps = 2, 4
    args.seed_list = list(range(42, 42 + args.seeds))
    result = start_result("crn_narrowing", args.quick, {k: v for k, v in vars(args).items() if k != "quick"})
    with tempfile.TemporaryDirectory() as tmp:
        server = embedded_server(Path(tmp) / "server.log", parallel=1).start()
        try:
            runs = asyncio.run(measure(server.base_url, args))
        finally:
            server.stop()
    seeds = args.seed_list
    figures: dict[str, Any] = {}
    for key in ("progression", "reward"):
        shared = paired_se(runs["a"], runs["b_shared"], seeds, key)
        independent = paired_se(runs["a"], runs["b_independent"], seeds, key)
        figures[key] = {"se_shared": shared, "se_independent": independent,
                        "narrowing": ratio(independent, shared) if shared > 0 else None}
    figures["action_agreement"] = {"shared": agreement(runs["a"], runs["b_shared"]),
                                   "independent": agreement(runs["a"], runs["b_independent"])}
    figures["per_seed"] = {str(s): {arm: {"progression": r[i]["progression"], "reward": r[i]["reward"]}
                                    for arm, r in runs.items()} for i, s in enumerate(seeds)}
    result["results"] = figures
    for key in ("progression", "reward"):  # a ratio is undefined when shared noise leaves no difference at all
        result["targets"].append(target(f"paired SE with shared noise ({key}), at most the independent one",
                                        figures[key]["se_shared"], figures[key]["se_independent"], "<=",
                                        source="issue 12: common random numbers narrow the comparison"))
    rows = [(key, f"{figures[key]['se_shared']:.2f}", f"{figures[key]['se_independent']:.2f}",
             figures[key]["narrowing"]) for key in ("progression", "reward")]
    rows.append(("same action", f"{figures['action_agreement']['shared']:.2f}",
                 f"{figures['action_agreement']['independent']:.2f}", ""))
    emit(result, args.out, [table("A vs B, paired SE", ("score", "shared noise", "independent", "ratio"), rows)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
