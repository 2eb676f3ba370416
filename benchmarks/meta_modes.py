"""The two meta modes on one batch: what a diagnosis costs and how much of the batch it shows the model.

A 1,000-step MiniHack batch (Corridor-R3, seed 7; the memory agent against the scripted server,
replies cycling, so memory files change and the agent oscillates) is diagnosed three ways by a
scripted meta endpoint: the one-call mode for an 8k context (the default ``context_tokens``) and
for a 128k one (a frontier model), and the tool-using mode reading steps 900-950 the way a model
would (list the episodes, read 900-950, read on from where each result was cut, reply). The
replies are scripted, so the figures are the harness's: tokens are the scripted server's usage,
characters / 4 of every message and of the tool definitions, summed over all requests of the
diagnosis (a tool conversation sends its history again with each request). Steps shown are the
steps put in front of the model verbatim.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from automem_dagster.llm import EndpointConfig, LLMClient
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.meta.batch_tools import BatchTools
from automem_dagster.meta.diagnose import diagnose
from automem_dagster.meta.evidence import FAILURE_KINDS, collect_evidence
from automem_dagster.rollout import RolloutSpec
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.scaffold import load_scaffold
from automem_dagster.standins.scripted_server import scripted_server
from benchmarks.common import emit, parser, run_batches, start_result, table

NAME = "meta_modes"
GAME, SEED = "minihack:Corridor-R3", 7
EPISODE = "minihack-Corridor-R3__seed7"
AGENT_RULES = [
    {"match": "Phase: LOG", "replies": ["<|APPEND|>actions_log.txt|moved west\n<|DONE|>",
                                        "<|WRITE|>strategy.txt|try the door to the east\n<|DONE|>",
                                        "<|APPEND|>dungeon_map.txt|wall north of x=21\n<|DONE|>", "<|DONE|>"]},
    {"match": "Phase: PLAN", "replies": ["<|ACTION|>west<|END|>", "<|ACTION|>east<|END|>", "<|ACTION|>search<|END|>",
                                         "<|ACTION|>north<|END|>", "<|ACTION|>bogus<|END|>"]},
]


def play(root: Path, steps: int) -> Path:
    """The batch, played once into ``root/batch`` (reused when it is there)."""
    batch = root / "batch"
    if (batch / "trajectories" / f"{EPISODE}.jsonl").exists():
        return batch
    (root / "agent_rules.json").write_text(json.dumps(AGENT_RULES))
    with scripted_server(root / "agent_rules.json", root / "agent_server.log") as server:
        game = EndpointConfig(name="game", base_url=server.base_url, constrained="none")
        spec = RolloutSpec(GAME, load_scaffold("minihack", 0), [SEED], steps, batch, 1)
        run_batches([spec], EndpointsConfig(game=game), root / "logs")
    return batch


def _reply(step: int) -> str:
    return json.dumps({"summary": "The agent walks back and forth in the corridor.", "findings": [
        {"episode": EPISODE, "step": step, "kind": "oscillation", "what_happened": "west then east",
         "scaffold_cause": "no oscillation signal", "proposed_change": "enable the oscillation signal"}]})


def reading_rules(batch: Path, first: int, last: int) -> list[dict]:
    """Scripted tool-calling replies that read steps ``first``-``last`` as a model would: list the
    episodes and read the range, then read on from where each result says it was cut (the cut points
    depend on the batch's text, so they are taken from the tools themselves). Later reads first, as
    the scripted server takes the first rule that matches."""
    paths = finished_episodes(batch)
    scaffold = load_scaffold("minihack", 0)
    tools, rules, start = BatchTools(collect_evidence(paths, [f.name for f in scaffold.files]), scaffold), [], first
    while start <= last:
        start = max(tools.call("read_steps", {"episode": EPISODE, "first": start, "last": last}).read[EPISODE]) + 1
        if start <= last:
            rules.insert(0, {"match": f"call read_steps from step {start}]", "reply": {"tool_calls": [
                {"name": "read_steps", "arguments": {"episode": EPISODE, "first": start, "last": last}}]}})
    opening = {"tool_calls": [{"name": "list_episodes", "arguments": {}},
                              {"name": "read_steps", "arguments": {"episode": EPISODE, "first": first, "last": last}}]}
    return [*rules, {"match": "Diagnose this batch", "reply": opening}]


def meta_rules(batch: Path, first: int, last: int) -> list[dict]:
    """One-call requests (they hold 'Trajectories:') get a diagnosis citing the failure point the
    compressor keeps longest (the first of the first kind, ``compress._Compressor.priority``), so it
    was shown even in an 8k context; tool requests read ``first``-``last`` (``reading_rules``), then
    reply citing a step read."""
    scaffold = load_scaffold("minihack", 0)
    evidence = collect_evidence(finished_episodes(batch), [f.name for f in scaffold.files])
    kept = next(p for kind in FAILURE_KINDS for p in evidence.failure_points if p.kind == kind)
    return [{"match": "Trajectories:\n", "reply": _reply(kept.step_start)},
            {"match": f"--- step {last}\n", "reply": _reply(first + (last - first) // 2)},
            *reading_rules(batch, first, last)]


async def diagnose_all(batch: Path, base_url: str, out: Path) -> dict[str, dict]:
    modes = {"one call, 8k context": {"context_tokens": 8192, "max_tokens": 700},
             "one call, 128k context": {"context_tokens": 131_072, "max_tokens": 700},
             "tools": {"meta_mode": "tools", "max_tokens": 700}}
    results = {}
    for label, settings in modes.items():
        client = LLMClient(EndpointConfig(name="meta", base_url="unused", constrained="none", **settings), base_url)
        diagnosis = await diagnose(batch, load_scaffold("minihack", 0), client, out / label.replace(" ", "_"))
        await client.close()
        cost = diagnosis.cost
        results[label] = {"requests": cost["requests"], "tool_calls": cost["tool_calls"],
                          "input_tokens": cost["input_tokens"], "output_tokens": cost["output_tokens"],
                          "steps_shown_verbatim": cost["steps_read_count"], "steps_read": cost.get("steps_read"),
                          "attempts": len(diagnosis.attempts)}
    return results


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=None, help="folder for the batch (reused when it holds one)")
    args = p.parse_args(argv)
    steps, first, last = (200, 150, 170) if args.quick else (1000, 900, 950)
    result = start_result(NAME, args.quick, {"game": GAME, "seed": SEED, "steps": steps, "read": [first, last]})
    with tempfile.TemporaryDirectory(prefix="automem-meta-modes-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        batch = play(work, steps)
        (work / "meta_rules.json").write_text(json.dumps(meta_rules(batch, first, last)))
        with scripted_server(work / "meta_rules.json", work / "meta_server.log") as server:
            result["results"] = asyncio.run(diagnose_all(batch, server.base_url, work / "diagnoses"))
    rows = [(label, r["requests"], r["tool_calls"], r["input_tokens"], r["output_tokens"],
             f"{r['steps_shown_verbatim']} of {steps}") for label, r in result["results"].items()]
    emit(result, args.out, [table(f"Diagnosis of a {steps}-step batch", [
        "mode", "requests", "tool calls", "input tokens", "output tokens", "steps shown verbatim"], rows)])
    return 0


if __name__ == "__main__":
    main()
