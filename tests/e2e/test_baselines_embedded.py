"""The baselines' grammars on the real embedded server (llama.cpp)."""

import json

import pytest
from baseline_agents import play, steps_of

from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.session import Clients
from automem_dagster.rollout import summarize_batch


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
