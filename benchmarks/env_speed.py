"""Environment speed: steps per second of each game through our adapter and through the raw env.

For each game the same seeded sequence of random valid actions is played three ways:

- ``adapter``: the game from ``make_game``, with its text observations;
- ``adapter_no_text``: the same adapter with the text rendering replaced by an empty string.
  Everything else is unchanged, so it plays exactly the same episodes (checked by a
  fingerprint of rewards, ends and positions) and the difference is what rendering costs;
- ``raw_env``: the env underneath, stepped directly with the same actions and episode budget.
  It skips all of the adapter: text, state extraction and, for NLE games, the automatic
  "--More--" presses (counted in the adapter, so the comparison can be made per env step). A
  raw NLE env left at a "--More--" or a prompt takes cheap steps that change nothing, so for
  NetHack its steps per second overstate what the adapter could reach; ``adapter_no_text`` is
  the like-for-like comparison.

The variants alternate in blocks within one run (rotating who goes first), so load on the
machine falls on all alike. Resets are timed separately and left out of steps per second. The
agent's own steps per second (with a model) come from the harness benchmark.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from automem_dagster.games import make_game, nle_text
from benchmarks.common import emit, parser, ratio, start_result, summary_ms, table

NAME = "env_speed"
GAMES = ("crafter", "minihack:Corridor-R3", "nethack")
FULL = {"steps": {"crafter": 4_000, "minihack:Corridor-R3": 20_000, "nethack": 20_000}, "blocks": 4, "seed": 0}
QUICK = {"steps": {"crafter": 60, "minihack:Corridor-R3": 300, "nethack": 300}, "blocks": 2, "seed": 0}


class _Counter:
    """Counts calls of the env's ``step`` seen by the adapter (an agent step may press "--More--" too)."""

    def __init__(self) -> None:
        self.calls = 0

    def install(self, env: Any) -> None:
        inner = type(env).step

        def step(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return inner(env, *args, **kwargs)

        env.step = step

    @staticmethod
    def uninstall(env: Any) -> None:
        env.__dict__.pop("step", None)


def _raw_stepper(game: Any) -> Callable[[str], bool]:
    """A step function on the env under ``game`` (the adapter's own instance and action indices), returning done.

    Crafter's env returns (obs, reward, done, info); NLE envs follow gymnasium's five-tuple.
    """
    index = game._action_index

    def step(action: str) -> bool:
        out = game._env.step(index[action])
        return bool(out[2] or out[3]) if len(out) == 5 else bool(out[2])

    return step


class Variant:
    """Timings of one way of stepping a game."""

    def __init__(self) -> None:
        self.step_s: list[float] = []
        self.reset_s: list[float] = []
        self.env_steps = 0
        self.episodes = 0
        self.observation_chars: list[int] = []
        self.fingerprint = hashlib.sha256()

    def report(self) -> dict[str, Any]:
        total = sum(self.step_s)
        chars = [c for c in self.observation_chars if c]
        return {
            "steps": len(self.step_s),
            "steps_per_s": ratio(len(self.step_s), total),
            "step": summary_ms(self.step_s),
            "env_steps": self.env_steps,
            "env_steps_per_step": ratio(self.env_steps, len(self.step_s)),
            "episodes_started": self.episodes,
            "reset": summary_ms(self.reset_s),
            **({"observation_chars_mean": sum(chars) / len(chars)} if chars else {}),
        }


@contextmanager
def _without_text(game: Any) -> Iterator[None]:
    """Replace the adapter's observation text with "" for the duration (the rest of the step is kept)."""
    if isinstance(game, nle_text.NLEGame):
        original = nle_text.render
        nle_text.render = lambda obs, message, style: ""
        try:
            yield
        finally:
            nle_text.render = original
    else:
        game._describe = lambda: ""
        try:
            yield
        finally:
            del game._describe


def _block(game: Any, variant: Variant, adapter: bool, actions: list[str], seed: int) -> int:
    """Play ``actions`` (resetting on episode end), timing each step; returns the next unused seed."""
    counter = _Counter()
    raw = _raw_stepper(game)

    def reset() -> None:
        nonlocal seed
        started = time.perf_counter()
        game.reset(seed)
        variant.reset_s.append(time.perf_counter() - started)
        variant.episodes += 1
        seed += 1
        if adapter:
            counter.install(game._env)  # Crafter builds a new env on every reset

    reset()
    steps_in_episode = 0
    for action in actions:
        if adapter:
            started = time.perf_counter()
            result = game.step(action)
            variant.step_s.append(time.perf_counter() - started)
            variant.observation_chars.append(len(result.observation))
            variant.fingerprint.update(repr((result.reward, result.done, result.state.position)).encode())
            done = result.done
        else:
            started = time.perf_counter()
            done = raw(action)
            variant.step_s.append(time.perf_counter() - started)
            variant.env_steps += 1
        steps_in_episode += 1
        if done or steps_in_episode >= game.max_steps:  # the adapter's budget, applied to the raw env too
            if adapter:
                variant.env_steps += counter.calls
                counter.calls = 0
            reset()
            steps_in_episode = 0
    if adapter:
        variant.env_steps += counter.calls
        counter.uninstall(game._env)  # the raw variant must step the env unwrapped
    return seed


def measure(name: str, steps: int, blocks: int, seed: int) -> dict[str, Any]:
    game = make_game(name)
    try:
        rng = random.Random(seed)
        names = list(game.actions())
        sequence = [rng.choice(names) for _ in range(steps)]
        per_block = max(1, steps // blocks)
        variants = {"adapter": Variant(), "adapter_no_text": Variant(), "raw_env": Variant()}
        names_in_order = list(variants)
        for b in range(blocks):
            actions = sequence[b * per_block:(b + 1) * per_block]
            block_seed = seed + 1000 * b
            for k in range(len(names_in_order)):  # rotate who goes first
                kind = names_in_order[(b + k) % len(names_in_order)]
                if kind == "adapter_no_text":
                    with _without_text(game):
                        _block(game, variants[kind], True, actions, block_seed)
                else:
                    _block(game, variants[kind], kind == "adapter", actions, block_seed)
    finally:
        game.close()
    a, t, r = (variants[k].report() for k in names_in_order)
    text_ms = a["step"]["mean_ms"] - t["step"]["mean_ms"]
    # Time the adapter spends beyond the env steps it made: text, state, --More-- handling, bookkeeping.
    beyond_ms = a["step"]["mean_ms"] - r["step"]["mean_ms"] * a["env_steps_per_step"]
    return {
        "actions": len(names),
        "adapter": a,
        "adapter_no_text": t,
        "raw_env": r,
        "same_episodes_with_and_without_text":
            variants["adapter"].fingerprint.hexdigest() == variants["adapter_no_text"].fingerprint.hexdigest(),
        "text_ms_per_step": text_ms,
        "text_share_of_adapter_step": ratio(text_ms, a["step"]["mean_ms"]),
        "no_text_over_adapter_steps_per_s": ratio(t["steps_per_s"], a["steps_per_s"]),
        "raw_over_adapter_steps_per_s": ratio(r["steps_per_s"], a["steps_per_s"]),
        "adapter_ms_beyond_raw_env_per_step": beyond_ms,
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--games", default=",".join(GAMES), help=f"comma-separated games (default {','.join(GAMES)})")
    p.add_argument("--steps", type=int, default=None, help="agent steps per variant and game (default: per game)")
    p.add_argument("--seed", type=int, default=None, help="seed of the action sequences and episodes (default 0)")
    args = p.parse_args(argv)
    base = QUICK if args.quick else FULL
    if args.steps is not None and args.steps < base["blocks"]:
        p.error(f"--steps {args.steps}: give at least {base['blocks']} steps, one per block")
    games = [g.strip() for g in args.games.split(",") if g.strip()]
    steps = {g: args.steps or base["steps"].get(g, base["steps"]["nethack"]) for g in games}
    settings = {"games": games, "steps": steps, "blocks": base["blocks"],
                "seed": base["seed"] if args.seed is None else args.seed}
    result = start_result(NAME, args.quick, settings)
    result["results"] = {g: measure(g, steps[g], settings["blocks"], settings["seed"]) for g in games}
    result["targets"] = []
    result["note"] = "no target is set for environment speed; it is context for the harness benchmark"
    rows = [[g, r["adapter"]["steps_per_s"], r["adapter_no_text"]["steps_per_s"], r["raw_env"]["steps_per_s"],
             r["text_ms_per_step"], r["text_share_of_adapter_step"], r["raw_over_adapter_steps_per_s"],
             r["adapter"]["env_steps_per_step"], r["adapter"].get("observation_chars_mean", float("nan")),
             r["adapter"]["reset"]["median_ms"], "yes" if r["same_episodes_with_and_without_text"] else "NO"]
            for g, r in result["results"].items()]
    emit(result, args.out, [table(
        "steps per second with the same actions: our adapter, the adapter without text, the raw env",
        ["game", "adapter", "no text", "raw env", "text ms/step", "text share", "raw/adapter", "env steps/step",
         "obs chars", "reset ms", "same episodes"], rows)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
