"""Context cost: input tokens per step and tokens per episode of each scaffold version and baseline.

Every scaffold version in ``assets/scaffolds/crafter/`` (v0 and any later ``vN.yaml``), any
added with ``--scaffold`` (a version or a YAML file, e.g. a candidate from a ``runs/``
lineage; repeat the option), and the baselines ``window``, ``cot``, ``rag`` (retrieval memory:
its embedding calls are ``embed`` turns) and ``summary`` (a running summary: its rewrites are
``summary`` turns, every 8 steps, every 2 at the quick size so that one happens) play the same
Crafter seeds through the project's runner against the same endpoints (one embedded server for
the whole run, serving the embeddings too). ``random`` plays too: it calls no model, so it costs
0 tokens.

From the trajectory files: input and output tokens per step (a memory-agent step is its LOG
and PLAN calls together), model calls per step, tokens per call and total tokens per episode.
Then how per-step input tokens grow with the step index: a least-squares slope and the last
quarter of the episode over the first (the rule is ``benchmarks.common.GROWTH_RULE``, stated
in the output). The target is no linear growth; a miss is reported as a miss.

Token counts do not depend on the machine's load, so the agents run one after the other and
nothing is alternated; the run's duration does depend on it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from automem_dagster.agent.baselines import BASELINES, DEFAULT_WINDOW, WINDOWED
from automem_dagster.agent.memory_settings import RETRIEVERS
from automem_dagster.games import game_family
from automem_dagster.llm.config import load_endpoints
from automem_dagster.paths import DEFAULT_ENDPOINTS, SCAFFOLDS
from automem_dagster.rollout import RolloutSpec
from automem_dagster.scaffold import Scaffold, content_hash, list_versions
from benchmarks.common import (
    GROWTH_RULE,
    batch_episodes,
    by_step_index,
    cost_figures,
    emit,
    growth,
    growth_targets,
    load_scaffold_ref,
    parser,
    run_batches,
    start_result,
    step_tokens,
    table,
)

NAME = "context_cost"
GAME = "crafter"
FULL = {"episodes": 1, "max_steps": 32, "summary_every": 8}
QUICK = {"episodes": 1, "max_steps": 3, "summary_every": 2}
FIRST_SEED = 42
DEFAULT_BASELINES = ("window", "cot", "rag", "summary", "random")


def scaffold_variants(game: str, extra: list[str]) -> list[tuple[str, Scaffold]]:
    """(label, scaffold) for every version of the game's family in assets, then each ``extra`` reference;
    a scaffold whose content equals one already listed is left out."""
    refs = [f"v{v}" for v in list_versions(game_family(game), SCAFFOLDS)] + list(extra)
    out, seen = [], set()
    for ref in refs:
        scaffold = load_scaffold_ref(game, ref)
        digest = content_hash(scaffold)
        if digest in seen:
            continue
        seen.add(digest)
        label = f"memory v{scaffold.version}" if ref.removeprefix("v").isdigit() else f"memory v{scaffold.version} ({ref})"
        out.append((label, scaffold))
    return out


def variant_figures(episodes: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """The cost of one agent and how its per-step input tokens grow over the episode."""
    cost = cost_figures(episodes)
    calls = cost["model_calls"]
    return {
        "episodes": cost["episodes"],
        "steps": cost["steps"],
        "model_calls_per_step": cost["model_calls_per_step"],
        "input_tokens_per_step": cost["input_tokens_per_step"]["mean"],
        "output_tokens_per_step": cost["output_tokens_per_step"]["mean"],
        "input_tokens_per_call": cost["input_tokens_per_call"]["mean"] if calls else 0.0,
        "output_tokens_per_call": cost["output_tokens_per_call"]["mean"] if calls else 0.0,
        "total_tokens_per_episode": cost["total_tokens_per_episode"]["mean"],
        "input_tokens_per_step_by_phase": cost["input_tokens_per_step_by_phase"],
        "valid_action_rate": cost["valid_action_rate"],
        # No model calls (random): nothing grows, and there is nothing to fit.
        "input_growth_per_step": growth(by_step_index(episodes, lambda s: step_tokens(s)[0])) if calls else None,
        "input_growth_per_call": growth(by_step_index(
            episodes, lambda s: step_tokens(s)[0] / len(s["turns"]) if s["turns"] else 0.0)) if calls else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--scaffold", action="append", default=[],
                   help="add a scaffold version v<N> or a YAML file (e.g. from a runs/ lineage); repeat for more")
    p.add_argument("--baselines", default=",".join(DEFAULT_BASELINES),
                   help=f"comma-separated baselines, '' for none (default {','.join(DEFAULT_BASELINES)})")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                   help=f"history length of window, cot, rag and summary (default {DEFAULT_WINDOW})")
    p.add_argument("--episodes", type=int, default=None,
                   help=f"episodes per agent (default {FULL['episodes']}, quick {QUICK['episodes']})")
    p.add_argument("--max-steps", type=int, default=None,
                   help=f"steps per episode (default {FULL['max_steps']}, quick {QUICK['max_steps']})")
    p.add_argument("--rag-retriever", choices=RETRIEVERS, default="embedding",
                   help="rag: embedding (the endpoints file's embed role, else the embedded model) or bm25")
    p.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: the embedded model)")
    args = p.parse_args(argv)
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        p.error(f"--baselines {','.join(unknown)}: expected some of {', '.join(BASELINES)}")
    base = QUICK if args.quick else FULL
    config = load_endpoints(args.endpoints)
    variants = scaffold_variants(GAME, args.scaffold)
    settings = {
        "game": GAME,
        "scaffolds": [label for label, _ in variants],
        "baselines": baselines,
        "window": args.window,
        "agent_settings": {"rag": {"retriever": args.rag_retriever}, "summary": {"every": base["summary_every"]}},
        "episodes": args.episodes or base["episodes"],
        "max_steps": args.max_steps or base["max_steps"],
        "concurrency": 1,
        "first_seed": FIRST_SEED,
        "endpoints": str(args.endpoints),
        "game_model": config.game.model,
        "embedded": config.uses_embedded(),
    }
    result = start_result(NAME, args.quick, settings)
    seeds = list(range(FIRST_SEED, FIRST_SEED + settings["episodes"]))
    reference = variants[0][1]  # a baseline uses its scaffold only to name the game family and the batch
    with tempfile.TemporaryDirectory(prefix="bench-context-") as tmp:
        work = Path(tmp)
        agents: list[tuple[str, str, Path, RolloutSpec]] = []
        for i, (label, scaffold) in enumerate(variants):
            batch = work / f"memory-{i}"
            agents.append((label, "memory", batch, RolloutSpec(GAME, scaffold, seeds, settings["max_steps"], batch, 1)))
        for name in baselines:
            label = f"{name} ({args.window})" if name in WINDOWED else name
            batch = work / name
            own = settings["agent_settings"].get(name, {})
            agents.append((label, name, batch, RolloutSpec(GAME, reference, seeds, settings["max_steps"], batch, 1,
                                                           agent=name, window=args.window, settings=own)))
        played = run_batches([spec for *_, spec in agents], config, work / "logs")
        per_agent = {}
        for (label, agent, batch, _), elapsed in zip(agents, played["elapsed_s"], strict=True):
            per_agent[label] = {"agent": agent, **variant_figures(batch_episodes(batch)), "batch_elapsed_s": elapsed}
    result["results"] = {"agents": per_agent, "connect_s": played["connect_s"]}
    result["growth_rule"] = GROWTH_RULE
    result["targets"] = [t for label, f in per_agent.items() if f["input_growth_per_step"] is not None
                         for t in growth_targets(label, f["input_growth_per_step"])]
    emit(result, args.out, _tables(result))
    return 0


def _tables(result: dict[str, Any]) -> list:
    rows = []
    for label, f in result["results"]["agents"].items():
        g = f["input_growth_per_step"] or {}
        rows.append([label, f["steps"], f["model_calls_per_step"], f["input_tokens_per_step"], f["output_tokens_per_step"],
                     f["input_tokens_per_call"], f["total_tokens_per_episode"], g.get("slope_per_step"),
                     g.get("slope_times_steps_over_mean"), g.get("last_over_first_quarter")])
    s = result["settings"]
    return [table(f"{s['game']}, {s['episodes']} episode(s) x {s['max_steps']} steps per agent",
                  ["agent", "steps", "calls/step", "in tok/step", "out tok/step", "in tok/call", "tok/episode",
                   "slope/step", "slope*L/mean", "last/first q"], rows)]


if __name__ == "__main__":
    raise SystemExit(main())
