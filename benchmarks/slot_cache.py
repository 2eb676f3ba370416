"""Slot cache: how much of each call's prompt llama.cpp serves from its cache when episodes share slots.

Two episodes are interleaved on one embedded server with 2 slots, call by call as the rollout
runner interleaves them (A's LOG, B's LOG, A's PLAN, B's PLAN, ...), each call the memory
agent's real system prompt (Crafter, scaffold v0) and a step message of its own. The run is
made twice: with every call of an episode pinned to one slot (``id_slot``, as the runner does
now through ``LLMClient``'s lane) and unpinned (the server picks a slot). Reported per mode:
the prompt tokens the server says it took from its cache and those it processed anew, per call.
Counts, not times, so the figures do not depend on the machine's load.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from automem_dagster.agent import prompts
from automem_dagster.games import make_game
from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.embedded_server import embedded_server
from automem_dagster.scaffold import Scaffold, load_scaffold
from benchmarks.common import emit, parser, ratio, start_result, table

NAME = "slot_cache"
FULL = {"steps": 4}
QUICK = {"steps": 2}


def episode_calls(step: int, episode: str, system: str, scaffold: Scaffold) -> list[list[dict]]:
    """The LOG and PLAN calls of one step of one episode: a shared step message, then the phase."""
    observation = f"Episode {episode}, step {step}: " + " ".join(f"cell{(i * 7 + step) % 50}-{episode}" for i in range(60))
    return [prompts.phase_messages(system, scaffold, prompts.StepContext(
                step, observation, "notes.txt (1 lines)", [("noop", 0.0)], [], phase))
            for phase in (prompts.LOG_PHASE, prompts.plan_phase("agent"))]


async def play(base_url: str, steps: int, pinned: bool, system: str, scaffold: Scaffold) -> list[dict[str, Any]]:
    """Every call of both episodes, interleaved; per call its episode, input and cached tokens."""
    # A long timeout: a retried call would find its own first attempt's prompt in the cache.
    cfg = EndpointConfig(name="game", base_url="embedded", max_tokens=1, temperature=0.0, timeout_s=1800, max_retries=0)
    client = LLMClient(cfg, base_url, slots=2 if pinned else None)
    rows = []
    try:
        for step in range(steps):
            per_episode = {lane: episode_calls(step, name, system, scaffold) for lane, name in enumerate("AB")}
            for phase in range(2):
                for lane, calls in per_episode.items():
                    comp = await client.complete(calls[phase], lane=lane)
                    rows.append({"episode": "AB"[lane], "step": step, "phase": phase, "input": comp.input_tokens,
                                 "cached": comp.cached_tokens})
    finally:
        await client.close()
    return rows


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    cached = sum(r["cached"] or 0 for r in rows)
    total = sum(r["input"] for r in rows)
    return {"calls": len(rows), "input_tokens_per_call": ratio(total, len(rows)),
            "cached_tokens_per_call": ratio(cached, len(rows)), "uncached_tokens_per_call": ratio(total - cached, len(rows)),
            "cached_share": ratio(cached, total)}


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help=f"steps per episode (default {FULL['steps']}, quick {QUICK['steps']})")
    args = p.parse_args(argv)
    steps = args.steps or (QUICK if args.quick else FULL)["steps"]
    result = start_result(NAME, args.quick, {"steps": steps, "episodes": 2, "slots": 2, "game": "crafter"})
    game = make_game("crafter", 5)
    scaffold = load_scaffold("crafter", 0)
    system = prompts.system_prompt(scaffold, game.actions(), "agent")
    game.close()
    by_mode = {}
    with tempfile.TemporaryDirectory(prefix="bench-slot-cache-") as tmp:
        for pinned in (True, False):  # a fresh server per mode: neither inherits the other's cache
            with embedded_server(Path(tmp) / f"server-{pinned}.log", parallel=2) as server:
                rows = asyncio.run(play(server.base_url, steps, pinned, system, scaffold))
            by_mode["pinned" if pinned else "unpinned"] = {**figures(rows), "calls_detail": rows}
    result["results"] = by_mode
    result["targets"] = []
    rows = [[mode, f["calls"], f["input_tokens_per_call"], f["cached_tokens_per_call"], f["uncached_tokens_per_call"],
             f["cached_share"]] for mode, f in by_mode.items()]
    emit(result, args.out, [table("2 episodes interleaved on 2 slots", ["mode", "calls", "input/call", "cached/call",
                                                                         "uncached/call", "cached share"], rows)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
