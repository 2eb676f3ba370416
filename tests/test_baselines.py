"""Baseline agents (random, sliding window, chain of thought) on real games through the shared runner.

Models are scripted servers; trajectories go through the same readers, summaries, metrics and
evidence as the memory agent's, and the CLI files baseline evaluations apart from scaffold ones.
"""

import asyncio
import json
import shutil

import pytest
from mlflow.tracking import MlflowClient

from automem_dagster import cli, tracking
from automem_dagster.agent.baselines import ChainOfThoughtAgent, RandomAgent, WindowAgent
from automem_dagster.agent.grammar import action_grammar, reasoning_grammar
from automem_dagster.agent.sampling import request_seed
from automem_dagster.commands import shared
from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.client import Completion, LLMClient
from automem_dagster.llm.session import Clients
from automem_dagster.loop.storage import Storage, batch_dir
from automem_dagster.meta.evidence import collect_evidence
from automem_dagster.metrics import behaviour_metrics
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.rollout import RolloutSpec, read_trajectory, run_batch, summarize_batch
from automem_dagster.rollout.identity import batch_identity
from automem_dagster.rollout.runner import BatchConflict, place_batch
from automem_dagster.scaffold import load_scaffold
from automem_dagster.tracking import EvaluationRun, Tracker

CRAFTER = {"noop": "nothing", "move_north": "go north", "do": "interact"}


def endpoint(base_url: str, **extra) -> EndpointConfig:
    return EndpointConfig(name="game", base_url=base_url, model="scripted", constrained="none", max_retries=0,
                          timeout_s=5, **extra)


def clients_for(server) -> Clients:
    return Clients(LLMClient(endpoint(server.base_url), server.base_url), None, None)


def play(game: str, out, clients: Clients, agent: str, seeds=(42,), steps=6, window=8):
    spec = RolloutSpec(game, load_scaffold(game.split(":")[0], 0), list(seeds), steps, out, concurrency=1, agent=agent,
                       window=window)

    async def go():
        try:
            return await run_batch(spec, clients)
        finally:
            if clients.game is not None:
                await clients.game.close()

    return asyncio.run(go())


def steps_of(out) -> dict[int, list[dict]]:
    result = {}
    for path in sorted((out / "trajectories").glob("*.jsonl")):
        header, steps, _ = read_trajectory(path)
        result[header["seed"]] = steps
    return result


class Recording:
    """A client that records every request and answers with one fixed reply."""

    def __init__(self, reply: str, **config):
        self.config = endpoint("http://127.0.0.1:9/v1", **config)
        self.reply = reply
        self.requests: list[tuple[list[dict], str | None]] = []
        self.seeds: list[int | None] = []

    async def complete(self, messages, grammar=None, json_schema=None, max_tokens=None, seed=None) -> Completion:
        self.requests.append((messages, grammar, max_tokens))
        self.seeds.append(seed)
        return Completion(self.reply, 100, 5, 0.01, 1, "stop")


def drive(agent, observations: list[str]) -> list:
    async def go():
        outcomes = []
        for step, obs in enumerate(observations):
            outcome = await agent.step(step, obs)
            agent.record_outcome(outcome.action, 1.0 if step == 1 else 0.0)
            outcomes.append(outcome)
        return outcomes

    return asyncio.run(go())


# -- random ---------------------------------------------------------------------------------

def test_random_is_seeded_and_never_calls_a_model(tmp_path, scripted):
    refuse = scripted([{"match": "", "status": 400}])             # any request would fail the episode
    play("crafter", tmp_path / "a", clients_for(refuse), "random", seeds=(42, 43), steps=10)
    play("crafter", tmp_path / "b", clients_for(refuse), "random", seeds=(42,), steps=10)
    a, b = steps_of(tmp_path / "a"), steps_of(tmp_path / "b")
    actions = {seed: [s["action"] for s in steps] for seed, steps in a.items()}
    assert actions[42] == [s["action"] for s in b[42]] and actions[42] != actions[43]
    assert all(s["turns"] == [] and s["action_valid"] for steps in a.values() for s in steps)
    summary = summarize_batch(tmp_path / "a")
    assert [e.model_calls for e in summary.episodes] == [0, 0] and summary.behaviour.model_calls_per_step == 0
    assert json.loads((tmp_path / "a" / "batch.json").read_text())["agent"] == "random"
    assert not (tmp_path / "a" / "memory" / "crafter__seed42").exists()          # no memory store for a baseline

    async def pick():
        agent = RandomAgent(CRAFTER, 7)
        return [(await agent.step(i, "")).action for i in range(50)]

    assert set(asyncio.run(pick())) == set(CRAFTER)


# -- sliding window -------------------------------------------------------------------------

def test_window_keeps_the_last_n_steps_in_context():
    client = Recording("<|ACTION|>move_north<|END|>")
    agent = WindowAgent("crafter", CRAFTER, lambda text: _parsed(text), client, window=3)
    outcomes = drive(agent, [f"observation number {i}" for i in range(6)])
    assert [d.action for d in outcomes] == ["move_north"] * 6
    for step, (messages, grammar, _) in enumerate(client.requests):
        assert grammar == action_grammar(list(CRAFTER))
        users = [m["content"] for m in messages if m["role"] == "user"]
        assert len(users) == min(step, 3) + 1
        assert [m["content"] for m in messages if m["role"] == "assistant"] == ["<|ACTION|>move_north<|END|>"] * min(step, 3)
        shown = [k for k in range(6) if f"observation number {k}" in "\n".join(users)]
        assert shown == list(range(max(0, step - 3), step + 1))
    assert "(your previous action earned +1)" in client.requests[2][0][-1]["content"]
    turn = outcomes[0].turns[0]
    assert (turn.phase, turn.endpoint, turn.input_tokens, turn.errors) == ("action", "game", 100, [])
    # Each request is seeded from (episode seed, step, phase, turn): distinct per step, the same on a rerun.
    assert client.seeds == [request_seed(0, step, "action", 0) for step in range(6)] and len(set(client.seeds)) == 6


def test_window_leaves_out_old_steps_that_do_not_fit_the_context():
    client = Recording("<|ACTION|>do<|END|>", context_tokens=1024, max_tokens=160)
    agent = WindowAgent("crafter", CRAFTER, lambda text: _parsed(text), client, window=8)
    drive(agent, ["x" * 600 for _ in range(8)])
    messages, _, _ = client.requests[-1]
    assert 1 <= sum(m["role"] == "user" for m in messages) - 1 < 7
    assert sum(len(m["content"]) for m in messages) <= (1024 - 160) * 3


def test_window_rollout_on_crafter_feeds_the_shared_metrics(tmp_path, scripted):
    # The scripted model answers badly while step 0 is still in its context: with a window of 2,
    # steps 0-2 see it and step 3 on do not.
    server = scripted([{"match": "Step 0:", "reply": "<|ACTION|>bogus<|END|>"},
                       {"match": "Answer with the action.", "reply": "<|ACTION|>do<|END|>"}])
    out = tmp_path / "window"
    summary = play("crafter", out, clients_for(server), "window", seeds=(42,), steps=6, window=2)
    steps = steps_of(out)[42]
    assert [s["action_valid"] for s in steps] == [False, False, False, True, True, True]
    assert [s["action"] for s in steps] == ["noop"] * 3 + ["do"] * 3
    assert "held no valid action" in steps[1]["observation"] and "'noop' was used" in steps[1]["observation"]
    turn = steps[4]["turns"][0]
    assert turn["phase"] == "action" and turn["input_tokens"] > 0 and turn["latency_s"] > 0
    header, _, _ = read_trajectory(next((out / "trajectories").glob("*.jsonl")))
    assert (header["agent"], header["window"], header["endpoints"]["game"]["model"]) == ("window", 2, "scripted")
    assert summary.episodes[0].model_calls == 6 and summary.behaviour.invalid_action_rate == pytest.approx(0.5)
    assert behaviour_metrics([steps]).model_calls_per_step == 1.0
    evidence = collect_evidence((out / "trajectories").glob("*.jsonl"))
    assert [(p.kind, p.step_start) for p in evidence.failure_points if p.kind == "invalid_action"] == \
        [("invalid_action", 0), ("invalid_action", 1), ("invalid_action", 2)]
    assert evidence.episodes[0].context.start_tokens_per_step > 0


# -- chain of thought -----------------------------------------------------------------------

def test_cot_parses_reasoning_then_action_and_falls_back_on_garbage(tmp_path, scripted):
    server = scripted([{"match": "one short line", "replies": [
        "The corridor leads east, so I follow it.\n<|ACTION|>east<|END|>",
        "no idea at all",
        "Nothing east; try north.\n<|ACTION|>north<|END|>",
    ]}])
    out = tmp_path / "cot"
    play("minihack:Corridor-R3", out, clients_for(server), "cot", seeds=(42,), steps=4)
    steps = steps_of(out)[42]
    assert [(s["action"], s["action_valid"]) for s in steps][:3] == [("east", True), ("search", False), ("north", True)]
    assert steps[0]["turns"][0]["phase"] == "cot" and steps[0]["turns"][0]["errors"] == []
    assert any("no <|ACTION|>" in e for e in steps[1]["turns"][0]["errors"])
    assert steps[1]["action_note"] and "held no valid action" in steps[2]["observation"]
    summarize_batch(out)


def test_cot_asks_for_bounded_reasoning():
    client = Recording("short thought\n<|ACTION|>do<|END|>")
    agent = ChainOfThoughtAgent("crafter", CRAFTER, lambda text: _parsed(text), client, window=2, reasoning_chars=120)
    (outcome,) = drive(agent, ["obs"])
    messages, grammar, max_tokens = client.requests[0]
    assert grammar == reasoning_grammar(list(CRAFTER), 120)
    assert "thought ::= [ -;=-~]{1,120}" in grammar and 'root ::= thought "\\n" action' in grammar
    assert "at most 120 characters" in messages[0]["content"]
    assert outcome.action == "do" and outcome.valid
    assert max_tokens == 160                     # 120 + newline + the longest action line fits the endpoint's 160


def test_cot_asks_for_enough_tokens_to_finish_its_longest_thought():
    """An ASCII character is at most one token, so 300 characters, a newline and the longest
    action line (``<|ACTION|>move_north<|END|>``, 27 characters) can take 328 tokens."""
    client = Recording("short thought\n<|ACTION|>do<|END|>")
    agent = ChainOfThoughtAgent("crafter", CRAFTER, lambda text: _parsed(text), client, window=2, reasoning_chars=300)
    drive(agent, ["obs"])
    assert client.requests[0][2] == 300 + 1 + 27
    window = Recording("<|ACTION|>do<|END|>")
    drive(WindowAgent("crafter", CRAFTER, lambda text: _parsed(text), window, window=2), ["obs"])
    assert window.requests[0][2] == 160



@pytest.mark.integration
@pytest.mark.parametrize("agent", ["window", "cot"])
def test_baselines_act_validly_under_their_grammars_on_the_embedded_server(agent, embedded, tmp_path):
    """Integration: llama.cpp accepts the window and reasoning grammars, and the real model acts validly."""
    game = EndpointConfig(name="game", base_url="unused", server="llama.cpp", constrained="gbnf")
    clients = Clients(LLMClient(game, embedded.base_url), None, None)
    out = tmp_path / agent
    play("crafter", out, clients, agent, seeds=(42,), steps=3, window=2)
    steps = steps_of(out)[42]
    assert [s["action_valid"] for s in steps] == [True, True, True]
    turns = [s["turns"][0] for s in steps]
    assert all(t["errors"] == [] and t["input_tokens"] > 0 for t in turns)
    if agent == "cot":                      # one line of reasoning, then the action line
        assert all("\n<|ACTION|>" in t["text"] and len(t["text"].split("\n")[0]) <= 300 for t in turns)
    summarize_batch(out)
    assert json.loads((out / "summary.json").read_text())["episodes"][0]["valid_action_rate"] == 1.0

# -- batches, CLI, tracking -----------------------------------------------------------------

@pytest.mark.contract
def test_a_batch_directory_refuses_another_agent(tmp_path, capsys):
    out = tmp_path / "b"
    args = ["rollout", "--game", "crafter", "--seeds", "42", "--max-steps", "2", "--out", str(out)]
    dead = tmp_path / "dead.yaml"
    dead.write_text("game: {name: game, base_url: 'http://127.0.0.1:9/v1', constrained: none, max_retries: 0}\n")
    assert cli.main([*args, "--agent", "random"]) == 0
    assert cli.main([*args, "--agent", "random"]) == 0                                    # the same batch resumes
    assert cli.main([*args, "--agent", "window", "--endpoints", str(dead)]) == 2
    assert "different agent" in capsys.readouterr().err
    assert json.loads((out / "batch.json").read_text())["agent"] == "random"


def test_a_batch_is_placed_by_its_identity_and_a_baseline_ignores_the_scaffold(tmp_path):
    champion = load_scaffold("crafter", 0)
    newer = champion.model_copy(update={"version": 1, "plan_prompt": champion.plan_prompt + " Go."})

    def placed(agent: str, scaffold=champion, window=8, fixed=True, previous=None):
        spec = RolloutSpec("crafter", scaffold, [42], 5, tmp_path / agent, agent=agent, window=window, fixed_dir=fixed)
        identity = asyncio.run(batch_identity(spec, Clients(None, None, None)))
        if previous is not None:
            (tmp_path / agent).mkdir(exist_ok=True)
            (tmp_path / agent / "batch.json").write_text(json.dumps({"game": "crafter", **previous}))
        return place_batch(spec, identity), identity

    _, random_identity = placed("random")
    assert placed("random", newer, previous={"identity": random_identity})[0] == tmp_path / "random"
    _, window8 = placed("window")
    with pytest.raises(BatchConflict, match=r"different agent\.window"):
        placed("window", window=4, previous={"identity": window8})
    beside, window4 = placed("window", window=4, fixed=False, previous={"identity": window8})
    assert beside == tmp_path / f"window-{window4['digest']}"
    _, memory = placed("memory")
    with pytest.raises(BatchConflict, match="different scaffold_hash"):
        placed("memory", newer, previous={"identity": memory})
    with pytest.raises(BatchConflict, match="identity \\(unknown"):      # a batch from before identities
        placed("memory", previous={"game": "crafter", "agent": "memory"})


def test_baseline_batch_dirs_differ_per_agent(tmp_path):
    base = tmp_path / "evaluations" / "crafter"
    assert batch_dir(tmp_path, "evaluations", "crafter", 3, [42, 43], 5) == base / "v3" / "steps5-seeds42-43-n2"
    assert batch_dir(tmp_path, "evaluations", "crafter", 3, [42, 43], 5, "random") == base / "random" / "steps5-seeds42-43-n2"
    assert batch_dir(tmp_path, "evaluations", "crafter", 3, [42, 43], 5, "cot", 4) == \
        base / "cot" / "steps5-seeds42-43-n2-window4"
    with pytest.raises(ValueError, match="agent 'greedy'"):
        RolloutSpec("crafter", load_scaffold("crafter", 0), [42], 5, tmp_path, agent="greedy")


def test_evaluate_a_baseline_files_it_apart_and_logs_it(tmp_path, monkeypatch, capsys):
    scaffolds = tmp_path / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    storage = Storage(runs=tmp_path / "runs", scaffolds=scaffolds, lineage=tmp_path / "lineage")
    monkeypatch.setattr(shared, "STORAGE", storage)
    args = ["evaluate", "--game", "crafter", "--agent", "random", "--eval-episodes", "2", "--max-steps", "4",
            "--endpoints", str(tmp_path / "never-read.yaml")]
    assert cli.main([*args, "--no-tracking"]) == 0
    out = storage.runs / "evaluations" / "crafter" / "random" / "steps4-seeds42-43-n2"
    assert json.loads((out / "batch.json").read_text())["agent"] == "random"
    assert json.loads((out / "metrics.json").read_text())["model_calls_per_step"] == 0
    assert len(list((out / "trajectories").glob("*.jsonl"))) == 2

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setattr(tracking, "Tracker", lambda: Tracker(uri, artifact_root=tmp_path / "artifacts"))
    assert cli.main(args) == 0                                   # reuses the finished batch, then logs it
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("automem-crafter").experiment_id])
    assert run.info.run_name == "random-baseline"
    assert run.data.tags["automem.agent"] == "random" and run.data.tags["automem.role"] == "baseline"
    assert run.data.params["agent"] == "random" and run.data.params["seeds"] == "42,43"
    assert run.data.metrics["model_calls_per_step"] == 0 and "random baseline" in run.data.tags["mlflow.note.content"]
    (row,) = Tracker(uri, artifact_root=tmp_path / "artifacts").runs_for("crafter")
    assert (row["agent"], row["role"]) == ("random", "baseline")


def test_baseline_role_goes_with_a_baseline_agent():
    fields = dict(game="crafter", family="crafter", version=0, parent=None, content_hash="h", round_id=None, seeds=[42],
                  max_steps=5, endpoints={}, progression_mean=0.0, progression_se=0.0, per_seed={42: 0.0}, behaviour={},
                  scaffold_yaml="")
    assert EvaluationRun(**fields, role="baseline", agent="cot", window=8).run_name == "cot-baseline"
    with pytest.raises(ValueError, match="role 'baseline' with agent 'memory'"):
        EvaluationRun(**fields, role="baseline")
    with pytest.raises(ValueError, match="role 'evaluation' with agent 'window'"):
        EvaluationRun(**fields, role="evaluation", agent="window")


def _parsed(text: str):
    from automem_dagster.games.actions import ActionVocabulary

    return ActionVocabulary(CRAFTER, "noop").parse(text)
