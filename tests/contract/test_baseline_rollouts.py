"""Baseline agents (random, sliding window, chain of thought) on real games through the shared runner, their
models scripted servers: trajectories go through the same readers, summaries, metrics and evidence as the
memory agent's, and a batch folder refuses another agent."""

import asyncio
import json

import pytest
from baseline_agents import CRAFTER, clients_for, play, steps_of

from automem_dagster import cli
from automem_dagster.agent.baselines import RandomAgent
from automem_dagster.meta.evidence import collect_evidence
from automem_dagster.metrics import behaviour_metrics
from automem_dagster.rollout import read_trajectory, summarize_batch


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


@pytest.mark.contract
def test_a_batch_directory_refuses_another_agent(tmp_path, capsys):
    out = tmp_path / "b"
    args = ["rollout", "--game", "crafter", "--seeds", "42", "--rollout-max-steps", "2", "--out", str(out)]
    dead = tmp_path / "dead.yaml"
    dead.write_text("game: {name: game, base_url: 'http://127.0.0.1:9/v1', constrained: none, max_retries: 0}\n")
    assert cli.main([*args, "--agent", "random"]) == 0
    assert cli.main([*args, "--agent", "random"]) == 0                                    # the same batch resumes
    assert cli.main([*args, "--agent", "window", "--endpoints", str(dead)]) == 2
    assert "different agent" in capsys.readouterr().err
    assert json.loads((out / "batch.json").read_text())["agent"] == "random"
