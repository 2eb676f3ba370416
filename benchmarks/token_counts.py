"""Token counts of a diagnosis input: the meta endpoint's exact count against chars/4, and their cost.

A Crafter batch (real observations; by default a scripted endpoint plays it, because the text
the meta-LLM reads is the observations and the memory operations, whatever model chose them; or
``--play endpoints`` with the file's game model) is rendered for diagnosis as ``meta/diagnose.py``
renders it, for the meta endpoint of ``--endpoints`` (its game endpoint when it has none; the
embedded server by default, whose llama.cpp tokenizer counts exactly).

Figures: the full batch and the fixed prompt counted both ways; the budget each way for the
endpoint's ``context_tokens``; the rendering each budget chooses, with its real token count
(chars/4 fits text that is really over its own budget, which only the halved budget keeps
inside the context); and the compression search's cost at a few budgets, calibrated (the
ratio from one exact count, the result counted exactly) against counting every candidate on
the server, with whether both chose the same layout.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from automem_dagster.llm.config import EndpointsConfig, load_endpoints
from automem_dagster.llm.session import connect
from automem_dagster.llm.tokens import TokenCounter
from automem_dagster.meta.compress import DEFAULT_WINDOW, _Compressor, _Episode, render_for_diagnosis
from automem_dagster.meta.diagnose import diagnosis_messages, fit_messages, input_budget, prompt_parts
from automem_dagster.meta.evidence import collect_evidence
from automem_dagster.paths import DEFAULT_ENDPOINTS
from automem_dagster.rollout import RolloutSpec
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.standins.scripted_server import scripted_server
from benchmarks.common import emit, load_scaffold_ref, parser, run_batches, start_result, table, target

NAME = "token_counts"
GAME = "crafter"
FULL = {"episodes": 4, "max_steps": 30}
QUICK = {"episodes": 1, "max_steps": 6}
FIRST_SEED = 42
BUDGET_SHARES = (0.5, 0.2, 0.05)
"""Search budgets as shares of the full batch's exact tokens."""
PLAY_RULES = [{"match": "Phase: LOG", "replies": [f"<|APPEND|>notes.txt|tree near {i}\n<|DONE|>" for i in range(5)]},
              {"match": "", "replies": ["<|ACTION|>move_left<|END|>", "<|ACTION|>do<|END|>", "<|ACTION|>noop<|END|>"]}]


def play(config: EndpointsConfig, spec: RolloutSpec, work: Path, scripted: bool) -> None:
    if not scripted:
        run_batches([spec], config, work / "logs")
        return
    rules = work / "play_rules.json"
    rules.write_text(json.dumps(PLAY_RULES))
    with scripted_server(rules, work / "logs" / "play.log") as server:
        game = {"name": "game", "base_url": server.base_url, "constrained": "none"}
        run_batches([spec], EndpointsConfig.model_validate({"game": game}), work / "logs")


def measure(paths: list[Path], spec: RolloutSpec, config: EndpointsConfig, work: Path) -> dict[str, Any]:
    async def with_counter():
        async with connect(config, work / "logs") as clients:
            client = clients.meta or clients.game
            return _figures(paths, spec, client.config, TokenCounter.for_client(client), client.base_url)

    return asyncio.run(with_counter())


def _figures(paths, spec, cfg, counter: TokenCounter, base_url: str) -> dict[str, Any]:
    evidence = collect_evidence(paths, [f.name for f in spec.scaffold.files])
    head, ask = prompt_parts(spec.scaffold, evidence)
    estimate = TokenCounter.estimate()
    full = render_for_diagnosis(paths, evidence, 10**9).text
    exact_full = counter.count(full)
    fixed = {"chars4": estimate.count_messages(diagnosis_messages(head + ask)),
             "exact": counter.count_messages(diagnosis_messages(head + ask))}
    budgets = {"chars4": input_budget(cfg, estimate, head + ask), "exact": input_budget(cfg, counter, head + ask)}
    by_estimate = render_for_diagnosis(paths, evidence, budgets["chars4"])
    by_exact = fit_messages(paths, evidence, budgets["exact"], counter, cfg, head, ask)
    searches = [_search(paths, evidence, full, exact_full, int(share * exact_full), cfg, base_url)
                for share in BUDGET_SHARES]
    return {
        "counter": counter.method, "note": counter.note, "context_tokens": cfg.context_tokens,
        "max_tokens": cfg.max_tokens,
        "full_batch": {"chars": len(full), "chars4": -(-len(full) // 4), "exact": exact_full,
                       "chars_per_token": round(len(full) / exact_full, 3)},
        "fixed_prompt": fixed, "budget": budgets,
        "chars4_rendering": {"estimated": by_estimate.tokens, "exact": counter.count(by_estimate.text),
                             "over_its_budget": round(counter.count(by_estimate.text) / budgets["chars4"], 3),
                             "omitted_steps": by_estimate.omitted_steps},
        "exact_rendering": {"exact": by_exact.tokens, "omitted_steps": by_exact.omitted_steps,
                            "request_tokens": counter.count_messages(diagnosis_messages(head + by_exact.text + ask))},
        "searches": searches,
    }


def _search(paths, evidence, full: str, exact_full: int, budget: int, cfg, base_url: str) -> dict[str, Any]:
    """The compression search at ``budget``, calibrated and counting every candidate."""
    calibrated = TokenCounter(cfg, base_url)
    t0 = time.perf_counter()
    try:
        a = render_for_diagnosis(paths, evidence, budget, counter=calibrated)
    except ValueError:
        return {"budget": budget, "fits": False}
    calibrated_s = time.perf_counter() - t0
    every = TokenCounter(cfg, base_url)
    episodes = [_Episode.load(Path(p), evidence.failure_points) for p in paths]
    t0 = time.perf_counter()
    b = _Compressor(episodes, exact_full, budget, DEFAULT_WINDOW, every.count, every.method).fit()
    every_s = time.perf_counter() - t0
    return {"budget": budget, "fits": True, "tokens": a.tokens, "omitted_steps": a.omitted_steps,
            "calibrated": {"requests": calibrated.requests, "seconds": round(calibrated_s, 4)},
            "every_candidate": {"requests": every.requests, "seconds": round(every_s, 4)},
            "same_layout": a.text == b.text}


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS,
                   help="endpoints YAML whose meta (else game) endpoint counts (default: the embedded model)")
    p.add_argument("--play", choices=("scripted", "endpoints"), default="scripted",
                   help="who plays the batch: fixed scripted replies (default) or the file's game model")
    p.add_argument("--scaffold", default="v0", help="scaffold version or YAML file (default v0)")
    args = p.parse_args(argv)
    base = QUICK if args.quick else FULL
    config = load_endpoints(args.endpoints)
    scaffold = load_scaffold_ref(GAME, args.scaffold)
    seeds = list(range(FIRST_SEED, FIRST_SEED + base["episodes"]))
    result = start_result(NAME, args.quick, {"game": GAME, "scaffold": f"v{scaffold.version}", "seeds": seeds,
                                             "max_steps": base["max_steps"], "play": args.play,
                                             "endpoints": str(args.endpoints), "budget_shares": list(BUDGET_SHARES)})
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as tmp:
        work = Path(tmp)
        spec = RolloutSpec(GAME, scaffold, seeds, base["max_steps"], work / "batch", 2)
        play(config, spec, work, args.play == "scripted")
        figures = measure(finished_episodes(work / "batch"), spec, config, work)
    result["results"] = figures
    fitted = [s for s in figures["searches"] if s["fits"]]
    result["targets"] = [
        target("exact rendering within its budget", figures["exact_rendering"]["exact"], figures["budget"]["exact"],
               unit="tokens", source="proposed"),
        target("request within context_tokens - max_tokens", figures["exact_rendering"]["request_tokens"],
               figures["context_tokens"] - figures["max_tokens"], unit="tokens", source="proposed"),
        target("calibrated search chose the exact search's layout", sum(s["same_layout"] for s in fitted), len(fitted),
               ">=", unit="budgets", source="proposed"),
    ]
    emit(result, args.out, _tables(figures))
    return 0


def _tables(f: dict[str, Any]) -> list:
    rows = [["full batch", f["full_batch"]["chars4"], f["full_batch"]["exact"]],
            ["fixed prompt", f["fixed_prompt"]["chars4"], f["fixed_prompt"]["exact"]],
            ["budget for the batch", f["budget"]["chars4"], f["budget"]["exact"]],
            ["chosen rendering, estimated", f["chars4_rendering"]["estimated"], f["exact_rendering"]["exact"]],
            ["chosen rendering, real", f["chars4_rendering"]["exact"], f["exact_rendering"]["exact"]],
            ["steps summarised", f["chars4_rendering"]["omitted_steps"], f["exact_rendering"]["omitted_steps"]]]
    search = [[s["budget"], s.get("tokens"), s.get("calibrated", {}).get("requests"),
               s.get("calibrated", {}).get("seconds"), s.get("every_candidate", {}).get("requests"),
               s.get("every_candidate", {}).get("seconds"), s.get("same_layout")] for s in f["searches"]]
    return [table(f"counted by {f['counter']}: {f['full_batch']['chars']} characters, context {f['context_tokens']}",
                  ["", "chars/4", "exact"], rows),
            table("compression search", ["budget", "tokens", "calibrated requests", "s", "every-candidate requests",
                                         "s", "same layout"], search)]


if __name__ == "__main__":
    raise SystemExit(main())
