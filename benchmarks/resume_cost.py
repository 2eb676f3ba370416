"""Resume cost: finishing an interrupted episode by resuming it against playing it again from step 0.

For each game one episode is played against a scripted endpoint whose replies take ``delay_s``
each (a stand-in for model latency). A fault rule fails the first request of step ``stop`` and
the run stops there, as a dead endpoint or a killed process leaves it. The rerun resumes: the
recorded steps are replayed through the game and the memory journal without a model call, then
the episode is played on. The same episode played uninterrupted is what a rerun from step 0
(the behaviour before resuming existed) costs. Figures per game: model requests and wall
seconds of the resumed rerun and of the full play, and the replay's cost per recorded step: the
resumed rerun's wall time beyond its played steps and beyond the setup both reruns pay (building
the game, files, summary: the full play's wall time outside its step records).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from automem_dagster.llm.config import EndpointConfig, EndpointsConfig
from automem_dagster.rollout import RolloutError, RolloutSpec
from automem_dagster.standins.scripted_server import scripted_server
from benchmarks.common import batch_episodes, emit, load_scaffold_ref, parser, ratio, run_batches, start_result, table, target
from benchmarks.harness_overhead import plan_action

NAME = "resume_cost"
GAMES = ("crafter", "minihack:Corridor-R3", "nethack")
FULL = {"max_steps": 300, "stop": 100, "delay_s": 0.05}
"""Crafter ends by itself near step 160 with the benchmark's inaction, so the fault comes before that."""
QUICK = {"max_steps": 12, "stop": 8, "delay_s": 0.0}
REPLAY_SHARE_LIMIT = 0.25
"""A replayed step costs at most this share of a played step (proposed: it makes no model call)."""


def _requests(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def measure(game: str, max_steps: int, stop: int, delay_s: float, work: Path) -> dict[str, Any]:
    """Interrupt one episode at ``stop``, resume it, and play it uninterrupted; count and time both reruns."""
    action = plan_action(game)
    rules = [{"match": f"Step {stop}. ", "status": 500, "times": 1},
             {"match": "Phase: LOG", "reply": "<|APPEND|>actions_log.txt|moved\n<|DONE|>", "delay_s": delay_s},
             {"match": "Phase: PLAN", "reply": f"<|ACTION|>{action}<|END|>", "delay_s": delay_s}]
    (work / "rules.json").write_text(json.dumps(rules))
    requests, scaffold = work / "requests.jsonl", load_scaffold_ref(game, "v0")
    with scripted_server(work / "rules.json", work / "server.log", request_log=requests) as server:
        config = EndpointsConfig(game=EndpointConfig(name="game", base_url=server.base_url, model="scripted",
                                                     constrained="none", max_retries=0))
        resumed, full = (RolloutSpec(game, scaffold, [42], max_steps, work / name, 1) for name in ("resumed", "full"))
        try:
            run_batches([resumed], config, work / "logs")
            return {"error": f"the episode ended before step {stop}: nothing to resume"}
        except RolloutError:
            pass
        before = _requests(requests)
        resumed_s = run_batches([resumed], config, work / "logs")["elapsed_s"][0]
        resumed_requests, before = _requests(requests) - before, _requests(requests)
        full_s = run_batches([full], config, work / "logs")["elapsed_s"][0]
        full_requests = _requests(requests) - before
    played = batch_episodes(work / "resumed")[0][stop:]
    played_s = sum(s["wall_s"] for s in played)
    setup_s = full_s - sum(s["wall_s"] for s in batch_episodes(work / "full")[0])  # game, files, summary: both pay it
    replay_ms = ratio((resumed_s - played_s - setup_s) * 1e3, stop)
    played_ms = ratio(played_s * 1e3, len(played))
    return {
        "steps": stop + len(played), "resumed_at": stop,
        "resumed_requests": resumed_requests, "requests_of_played_steps": sum(len(s["turns"]) for s in played),
        "full_requests": full_requests, "resumed_s": resumed_s, "full_s": full_s, "setup_s": setup_s,
        "resumed_over_full_s": ratio(resumed_s, full_s),
        "replay_ms_per_step": replay_ms, "played_ms_per_step": played_ms,
        "replay_over_played_step": ratio(replay_ms, played_ms),
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--games", default=",".join(GAMES), help=f"comma-separated games (default {','.join(GAMES)})")
    args = p.parse_args(argv)
    settings = {"games": [g.strip() for g in args.games.split(",") if g.strip()], **(QUICK if args.quick else FULL),
                "endpoint": "scripted server, every reply after delay_s"}
    result = start_result(NAME, args.quick, settings)
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        for game in settings["games"]:
            work = Path(tmp) / game.replace(":", "-")
            work.mkdir()
            figures = measure(game, settings["max_steps"], settings["stop"], settings["delay_s"], work)
            result["results"][game] = figures
            extra = figures.get("resumed_requests", 0) - figures.get("requests_of_played_steps", 0)
            result["targets"] += [
                {**target("model requests for replayed steps", None if "error" in figures else extra, 0,
                          source="issue"), "game": game},
                {**target("replayed step / played step (time)", figures.get("replay_over_played_step"),
                          REPLAY_SHARE_LIMIT, source="proposed"), "game": game},
            ]
    rows = [(g, f.get("resumed_at"), f.get("resumed_requests"), f.get("full_requests"), _s(f.get("resumed_s")),
             _s(f.get("full_s")), _s(f.get("replay_ms_per_step")), _s(f.get("played_ms_per_step")))
            for g, f in result["results"].items()]
    emit(result, args.out, [table("resume against replay from step 0", ("game", "resumed at", "requests resumed",
                                                                        "requests full", "resumed s", "full s",
                                                                        "replay ms/step", "played ms/step"), rows)])
    return 0


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
