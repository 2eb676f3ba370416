"""The memory baselines: ``rag`` (retrieval memory, embedding or BM25) and ``summary`` (a bounded
running summary), on real games through the shared runner, with the scripted server as the model
and its ``/v1/embeddings`` stand-in (hashed word counts) as the embedding model."""

import asyncio
import json
import re

import pytest
from batch_content import batch_content
from builders import endpoints_file
from crafter_actions import CRAFTER

from automem_dagster.agent.memory_settings import RagSettings, SummarySettings
from automem_dagster.agent.rag_agent import RagAgent
from automem_dagster.agent.summary_agent import SummaryAgent
from automem_dagster.games.actions import ActionVocabulary
from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.session import Clients
from automem_dagster.loop.storage import batch_dir
from automem_dagster.rollout import RolloutSpec, read_trajectory, run_batch, summarize_batch
from automem_dagster.rollout.identity import differences
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold import load_scaffold

ACTION = {"match": "Answer with the action.", "reply": "<|ACTION|>do<|END|>"}


def client_for(server, name="game", **extra) -> LLMClient:
    cfg = EndpointConfig(name=name, base_url=server.base_url, model="scripted", max_retries=0, timeout_s=5,
                         **{"constrained": "none", "server": "llama.cpp", **extra})  # the stand-in reads `grammar`
    return LLMClient(cfg, server.base_url)


def bodies(server, path: str) -> list[dict]:
    lines = server.request_log.read_text().splitlines() if server.request_log.exists() else []
    return [json.loads(line)["body"] for line in lines if json.loads(line)["path"] == path]


def drive(agent, observations: list[str], rewards: dict[int, float] | None = None) -> list:
    async def go():
        outcomes = []
        for step, obs in enumerate(observations):
            outcome = await agent.step(step, obs)
            agent.record_outcome(outcome.action, (rewards or {}).get(step, 0.0))
            outcomes.append(outcome)
        await agent.client.close()
        return outcomes

    return asyncio.run(go())


@pytest.mark.parametrize("retriever", ["embedding", "bm25"])
def test_rag_puts_the_nearest_earlier_steps_beside_its_window(tmp_path, scripted, retriever):
    server = scripted([ACTION], embeddings=True)  # a llama.cpp started with --embeddings (chat and embeddings)
    observations = ["a tree and wood to the north", "water and sand", "stone and coal below", "a zombie attacks",
                    "grass everywhere", "iron ore shines", "tree wood north forest"]
    settings = RagSettings(retriever, k=2, record=("observation", "outcome"))
    agent = RagAgent("crafter", CRAFTER, ActionVocabulary(CRAFTER, "noop").parse, client_for(server), window=2,
                     settings=settings, embed_client=client_for(server, "embed") if retriever == "embedding" else None)
    outcomes = drive(agent, observations, rewards={0: 1.0})
    context = outcomes[-1].memory_context
    assert context["retrieved"][0]["step"] == 0 and context["candidates"] == 4    # steps 4-5 are in the window
    assert context["retrieved"][0]["text"] == "step 0:\na tree and wood to the north\noutcome: earned +1"
    assert "action:" not in context["retrieved"][0]["text"]                      # record fields are a setting
    prompt = bodies(server, "/v1/chat/completions")[-1]["messages"][-1]["content"]
    assert prompt.index("earned +1") < prompt.index("Step 6:")
    assert [d.memory_context["retrieved"] for d in outcomes[:3]] == [[], [], []]   # nothing older than the window
    phases = [[t.phase for t in d.turns] for d in outcomes]
    if retriever == "embedding":
        assert phases == [["embed", "action"]] * 7 and "key_vector" in context
        embeds = bodies(server, "/v1/embeddings")
        assert [b["input"] for b in embeds] == [[o] for o in observations] and embeds[0]["encoding_format"] == "float"
        assert outcomes[0].turns[0].input_tokens == len(observations[0]) // 4 > 0   # the embedding call's cost
    else:
        assert phases == [["action"]] * 7 and "key_vector" not in context and not bodies(server, "/v1/embeddings")


def test_summary_keeps_to_its_cap_and_is_rewritten_every_n_steps(tmp_path, scripted):
    long = "You found a tree north and water east. " * 40                       # about 1,600 characters
    server = scripted([{"match": "Write the new summary.", "replies": [long, "short notes"]}, ACTION])
    agent = SummaryAgent("crafter", CRAFTER, ActionVocabulary(CRAFTER, "noop").parse,
                         client_for(server, constrained="gbnf"), window=1,
                         settings=SummarySettings(every=3, summary_tokens=20))
    outcomes = drive(agent, [f"observation {i}" for i in range(10)])
    assert [[t.phase for t in d.turns] for d in outcomes] == \
        [["summary", "action"] if s in (3, 6, 9) else ["action"] for s in range(10)]
    rewrites = [b for b in bodies(server, "/v1/chat/completions") if "Write the new summary." in str(b["messages"])]
    assert [b["max_tokens"] for b in rewrites] == [20, 20, 20]                 # the token cap, for the server
    assert all(b["grammar"] == "root ::= [ -;=-~]{1,60}\n" for b in rewrites)   # 20 tokens x 3
    first, second = (b["messages"][-1]["content"] for b in rewrites[:2])
    assert re.findall(r"Step (\d):", first) == ["0", "1", "2"] and "(none yet" in first
    assert re.findall(r"Step (\d):", second) == ["3", "4", "5"] and long[:60].strip() in second
    kept = [d.memory_context for d in outcomes]
    assert len(kept[3]["summary"]) == 60 and kept[3]["summary"] == " ".join(long.split())[:60]
    assert kept[3]["refreshed"] and kept[3]["summarised_steps"] == [0, 2] and not kept[4]["refreshed"]
    assert "cut to its cap of 60" in outcomes[3].turns[0].errors[0]
    assert kept[6]["summary"] == "short notes" and kept[7]["summary"] == "short notes"
    action_prompt = bodies(server, "/v1/chat/completions")[-1]["messages"][-1]["content"]
    assert "Your summary of the episode so far:" in action_prompt and kept[9]["summary"] in action_prompt


GAMES = ["crafter", "minihack:Corridor-R3", "nethack"]
REPLY = {"crafter": "do", "minihack:Corridor-R3": "east", "nethack": "search"}


def play(game, out, server, agent, settings, steps=4, seeds=(42,)):
    clients = Clients(client_for(server), None, None, embed=client_for(server, "embed"))
    spec = RolloutSpec(game, load_scaffold(game.split(":")[0], 0), list(seeds), steps, out, concurrency=1,
                       agent=agent, window=2, settings=settings)

    async def go():
        try:
            return await run_batch(spec, clients)
        finally:
            await clients.game.close()
            await clients.embed.close()

    return asyncio.run(go())


@pytest.mark.parametrize("game", GAMES)
def test_rag_and_summary_play_every_game_and_count_their_extra_calls(tmp_path, scripted, game):
    server = scripted([{"match": "Write the new summary.", "reply": "explored; keep going"},
                       {"match": "Answer with the action.", "reply": f"<|ACTION|>{REPLY[game]}<|END|>"}], embeddings=True)
    every_field = ["observation", "action", "outcome"]
    for agent, settings, extra, recorded in (
            ("rag", {"k": 2}, "embed", {"retriever": "embedding", "k": 2, "record": every_field}),
            ("rag", {"retriever": "bm25", "k": 2}, None, {"retriever": "bm25", "k": 2, "record": every_field}),
            ("summary", {"every": 2}, "summary", {"every": 2, "summary_tokens": 128})):
        out = tmp_path / f"{agent}-{settings.get('retriever', '')}"
        summary = play(game, out, server, agent, settings, steps=5)
        header, steps, _ = read_trajectory(next((out / "trajectories").glob("*.jsonl")))
        assert (header["agent"], header["window"], header["settings"]) == (agent, 2, recorded)
        assert json.loads((out / "batch.json").read_text())["settings"] == header["settings"]
        assert [s["action"] for s in steps] == [REPLY[game]] * 5 and all(s["action_valid"] for s in steps)
        assert all("memory_context" in s for s in steps)
        phases = [[t["phase"] for t in s["turns"]] for s in steps]
        if agent == "rag":
            assert [len(s["memory_context"]["retrieved"]) for s in steps] == [0, 0, 0, 1, 2]  # older than the window
            assert phases == [["embed", "action"] if extra else ["action"]] * 5
        else:
            assert phases == [["action"], ["action"], ["summary", "action"], ["action"], ["summary", "action"]]
            assert steps[3]["memory_context"] == {"summary": "explored; keep going", "refreshed": False}
        calls = {"embed": 10, "summary": 7, None: 5}[extra]
        assert summary.behaviour.model_calls_per_step == calls / 5                # the extra calls are in the bill
        assert summarize_batch(out).episodes[0].model_calls == calls


def test_memory_baseline_settings_name_and_guard_their_batch(tmp_path, scripted):
    base = tmp_path / "evaluations" / "crafter"
    assert batch_dir(tmp_path, "evaluations", "crafter", 0, [42, 43], 5, "rag", 2, {"retriever": "bm25"}) == \
        base / "rag" / "steps5-seeds42-43-n2-window2-bm25-k4-oao"
    assert batch_dir(tmp_path, "evaluations", "crafter", 0, [42], 5, "summary", 2, {"summary_tokens": 64}) == \
        base / "summary" / "steps5-seeds42-42-n1-window2-every8-cap64"
    server = scripted([ACTION])
    out = tmp_path / "rag"
    first = play("crafter", out, server, "rag", {"retriever": "bm25", "k": 2}, steps=2)
    other = play("crafter", out, server, "rag", {"retriever": "bm25", "k": 3}, steps=2)   # never the k=2 batch
    identities = [read_manifest(b.out_dir)["identity"] for b in (first, other)]
    assert other.out_dir == f"{out}-{identities[1]['digest']}" and len(other.episodes) == 1
    assert differences(*identities) == ["agent.settings.k"]
    with pytest.raises(ValueError, match="agent 'window' takes no settings"):
        RolloutSpec("crafter", load_scaffold("crafter", 0), [42], 2, out, agent="window", settings={"k": 2})




MOVES = ["north", "east", "south", "west", "search", "west", "south", "north", "search", "west"]


def _endpoints(tmp_path, server) -> str:
    return str(endpoints_file(tmp_path / "endpoints.yaml", server, ("game", "embed"), max_retries=0))


@pytest.mark.parametrize("agent", [["rag", "--rag-k", "2"], ["summary", "--summary-every", "5"]],
                         ids=["rag", "summary"])
def test_an_interrupted_memory_baseline_resumes_to_the_uninterrupted_trajectory(tmp_path, scripted, agent):
    """Step 12's action call fails once; the rerun replays steps 0-11 without a model or embedding
    call, restoring the retrieval index (its recorded vectors) or the running summary, and the
    episode ends as one played straight through."""
    from automem_dagster.cli import main as cli_main

    rules = [{"match": "Write the new summary.", "replies": ["seen a corridor", "went east twice", "searched"]},
             {"match": "Step 12:", "status": 500, "times": 1},
             *({"match": f"{d}:", "reply": f"<|ACTION|>{a}<|END|>"} for d, a in enumerate(MOVES))]
    server = scripted(rules, embeddings=True)
    out, reference = tmp_path / "interrupted", tmp_path / "reference"
    args = ["rollout", "--game", "minihack:Corridor-R3", "--seeds", "42", "--rollout-max-steps", "20", "--concurrency", "1",
            "--endpoints", _endpoints(tmp_path, server), "--agent", *agent, "--window", "3"]
    assert cli_main([*args, "--out", str(out)]) == 2
    before = len(server.request_log.read_text().splitlines())
    assert cli_main([*args, "--out", str(out)]) == 0
    resumed = [json.loads(line) for line in server.request_log.read_text().splitlines()[before:]]
    assert cli_main([*args, "--out", str(reference)]) == 0
    header, steps, _ = read_trajectory(next((out / "trajectories").glob("*.jsonl")))
    assert [r["at_step"] for r in header["resumes"]] == [12]
    assert batch_content(out)[:3] == batch_content(reference)[:3]     # trajectories, memory folders, summary
    chats = [r["body"] for r in resumed if r["path"] == "/v1/chat/completions"]
    assert "Step 12:" in chats[0]["messages"][-1]["content"]                # the first call is step 12's
    assert len(chats) == sum(t["phase"] != "embed" for s in steps[12:] for t in s["turns"])   # none for 0-11
    embeds = [r for r in resumed if r["path"] == "/v1/embeddings"]
    assert len(embeds) == (8 if agent[0] == "rag" else 0)                   # one per played step, none replayed
    if agent[0] == "summary":
        assert [s["memory_context"]["refreshed"] for s in steps].count(True) == 3    # steps 5, 10 and 15
        assert steps[15]["memory_context"]["summarised_steps"] == [10, 14] and steps[12]["memory_context"]["summary"]
    else:
        assert any(s["memory_context"]["retrieved"] for s in steps[12:])




def test_compare_lines_up_every_agent_with_its_cost_per_step(tmp_path, scripted, monkeypatch, capsys):
    """rag and summary evaluations are logged with their settings and per-step cost, and `automem
    compare` orders them among the others, with calls and tokens per step beside progression."""
    import shutil

    import matplotlib.image
    from mlflow.tracking import MlflowClient

    from automem_dagster import cli, tracking
    from automem_dagster.commands import shared
    from automem_dagster.loop.report import agent_points
    from automem_dagster.loop.storage import Storage
    from automem_dagster.paths import SCAFFOLDS
    from automem_dagster.tracking import Tracker

    scaffolds = tmp_path / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    monkeypatch.setattr(shared, "STORAGE", Storage(runs=tmp_path / "runs", scaffolds=scaffolds,
                                                   lineage=tmp_path / "lineage"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setattr(tracking, "Tracker", lambda: Tracker(uri, artifact_root=tmp_path / "artifacts"))
    server = scripted([{"match": "Write the new summary.", "reply": "notes"}, ACTION])
    base = ["evaluate", "--game", "crafter", "--eval-episodes", "2", "--eval-max-steps", "3", "--window", "1",
            "--endpoints", _endpoints(tmp_path, server)]
    for agent in (["summary", "--summary-every", "2"], ["rag", "--rag-retriever", "bm25"]):
        assert cli.main([*base, "--agent", *agent]) == 0
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("automem-crafter").experiment_id])
    params = {r.data.tags["automem.agent"]: r.data.params for r in runs}
    assert json.loads(params["rag"]["agent_settings"]) == {"retriever": "bm25", "k": 4,
                                                          "record": ["observation", "action", "outcome"]}
    assert json.loads(params["summary"]["agent_settings"]) == {"every": 2, "summary_tokens": 128}
    points = agent_points(Tracker(uri, artifact_root=tmp_path / "artifacts").runs_for("crafter"), "crafter",
                          "42,43", 3)
    assert [p.label for p in points] == ["rag (bm25)", "summary"]
    assert [p.costs["model_calls_per_step"] for p in points] == [1.0, 4 / 3]        # a rewrite at step 2 of 3
    assert points[1].tokens_per_step > points[0].tokens_per_step > 0
    capsys.readouterr()
    out = tmp_path / "agents.png"
    assert cli.main(["compare", "--game", "crafter", "--eval-episodes", "2", "--eval-max-steps", "3", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert re.search(r"summary\s+│[^│]+│\s+1\.33\s+│", table) and "rag (bm25)" in table
    assert matplotlib.image.imread(out).shape[1] > 1000                      # progression, calls and tokens panels
