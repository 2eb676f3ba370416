"""Baseline agents (sliding window, chain of thought) with a recording client, and how the CLI places and
files their batches apart from scaffold ones (the seeded random agent plays without a model)."""

import asyncio
import json
import shutil

import pytest
from baseline_agents import CRAFTER, Recording, drive, parsed
from mlflow.tracking import MlflowClient

from automem_dagster import cli, tracking
from automem_dagster.agent.baselines import ChainOfThoughtAgent, WindowAgent
from automem_dagster.agent.grammar import action_grammar, reasoning_grammar
from automem_dagster.agent.sampling import request_seed
from automem_dagster.commands import shared
from automem_dagster.llm.session import Clients
from automem_dagster.loop.storage import Storage, batch_dir
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.rollout import RolloutSpec
from automem_dagster.rollout.batch_spec import BatchConflict, place_batch
from automem_dagster.rollout.identity import batch_identity
from automem_dagster.scaffold import load_scaffold
from automem_dagster.tracking import EvaluationRun, Tracker


def test_window_keeps_the_last_n_steps_in_context():
    client = Recording("<|ACTION|>move_north<|END|>")
    agent = WindowAgent("crafter", CRAFTER, lambda text: parsed(text), client, window=3)
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
    agent = WindowAgent("crafter", CRAFTER, lambda text: parsed(text), client, window=8)
    drive(agent, ["x" * 600 for _ in range(8)])
    messages, _, _ = client.requests[-1]
    assert 1 <= sum(m["role"] == "user" for m in messages) - 1 < 7
    assert sum(len(m["content"]) for m in messages) <= (1024 - 160) * 3


def test_cot_asks_for_bounded_reasoning():
    client = Recording("short thought\n<|ACTION|>do<|END|>")
    agent = ChainOfThoughtAgent("crafter", CRAFTER, lambda text: parsed(text), client, window=2, reasoning_chars=120)
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
    agent = ChainOfThoughtAgent("crafter", CRAFTER, lambda text: parsed(text), client, window=2, reasoning_chars=300)
    drive(agent, ["obs"])
    assert client.requests[0][2] == 300 + 1 + 27
    window = Recording("<|ACTION|>do<|END|>")
    drive(WindowAgent("crafter", CRAFTER, lambda text: parsed(text), window, window=2), ["obs"])
    assert window.requests[0][2] == 160


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
    args = ["evaluate", "--game", "crafter", "--agent", "random", "--eval-episodes", "2", "--eval-max-steps", "4",
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
