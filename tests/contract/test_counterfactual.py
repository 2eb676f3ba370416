"""Counterfactual credit on the key-and-door game: arms that never differ, a consequence beyond the replay's
cap, the side-by-side view. Curation's known-answer checks are tests/contract/test_known_answer_variants.py.

The key-and-door game (the built-in ``keydoor``, played as ``keydoor:hall5-decoys0``: no decoys, so
the scripted notes below are the only ones) shows the key's wing once; only a note of it, read at the
junction, gets the agent through the door. Its scripted model (``standins/keydoor_rules.py``, served by the
scripted stand-in) acts on what its PLAN read shows and writes junk beside the useful note.
"""

import asyncio
from pathlib import Path

import pytest
import yaml
from builders import scripted_client

from automem_dagster.cli import main as cli_main
from automem_dagster.games.plugin import env_ref
from automem_dagster.llm.session import Clients
from automem_dagster.meta.counterfactual import ReplayBudget, measure
from automem_dagster.meta.decisions import ScoreWeights, extract_decisions
from automem_dagster.rollout.batch_spec import RolloutSpec
from automem_dagster.rollout.runner import run_batch
from automem_dagster.scaffold import load_scaffold_file
from automem_dagster.standins.keydoor_rules import game_rules, memory_rules

ROOT = Path(__file__).resolve().parents[2]


GAME = "keydoor:hall5-decoys0"
EPISODE = "keydoor-hall5-decoys0__seed5"
SEEDS = [1, 5, 6, 7]
HORIZON, K = 4, 5
"""The cheap score's window, and the replay's: K = 5 steps from the key's note reach the junction's choice."""


@pytest.fixture
def keydoor():
    """The built-in key-and-door game without decoys, its hall as long as the scripted rules expect."""
    return env_ref(GAME)


def with_clients(servers, work):
    """Run ``work(clients)`` on fresh clients of the scripted game and memory servers, closed after."""
    async def go():
        clients = Clients(scripted_client(servers[0], "game"), scripted_client(servers[1], "memory"), None)
        try:
            return await work(clients)
        finally:
            await clients.game.close()
            await clients.memory.close()
    return asyncio.run(go())


@pytest.fixture
def played(keydoor, scripted, tmp_path):
    """Four episodes of the key-and-door game, played by the scripted memory and game models."""
    servers = (scripted(game_rules()), scripted(memory_rules()))
    scaffold = load_scaffold_file(keydoor.plugin.scaffold)
    batch = tmp_path / "batch"
    with_clients(servers, lambda clients: run_batch(RolloutSpec(GAME, scaffold, SEEDS, 14, batch,
                                                                concurrency=1), clients))
    return batch, scaffold, servers


@pytest.mark.contract
def test_a_decision_whose_arms_never_differ_scores_exactly_zero(played):
    batch, scaffold, servers = played
    path = next((batch / "trajectories").glob("*.jsonl"))
    decisions = extract_decisions(path, scaffold, ScoreWeights(horizon=HORIZON))
    junk = next(d for d in decisions if d.phase == "log" and d.ops and "key:" not in d.ops[0])
    effect = with_clients(servers, lambda clients: measure(junk, scaffold, clients,
                                                           ReplayBudget(decisions=1, pairs=2)))
    made, ablated = effect.arms[0]["made"], effect.arms[0]["ablated"]
    assert [s["action"] for s in made["steps"]] == [s["action"] for s in ablated["steps"]]
    assert made["steps"][0]["memory"] != ablated["steps"][0]["memory"]  # the write was ablated, yet nothing changed
    assert effect.effect == 0.0 and effect.gain == 0.0 and not effect.differ and not effect.unresolved


@pytest.mark.contract
def test_a_consequence_beyond_the_cap_is_unresolved_not_zero(played):
    """The key's note is read again at every later step, but a cap of 2 steps ends the arms in the hallway,
    where the note changes nothing yet: unresolved at horizon 2, never "effect 0"; with the default cap its
    arms reach the junction and it is measured."""
    batch, scaffold, servers = played
    path = next(p for p in (batch / "trajectories").glob("*.jsonl") if p.name.startswith(EPISODE))
    note = next(d for d in extract_decisions(path, scaffold) if d.phase == "log" and "key:" in " ".join(d.ops))
    assert note.score.last_read > note.step + 2
    short = with_clients(servers, lambda clients: measure(note, scaffold, clients, ReplayBudget(horizon=2)))
    assert short.unresolved and not short.differ and short.effect == 0 and short.window == 2
    full = with_clients(servers, lambda clients: measure(note, scaffold, clients, ReplayBudget()))
    assert full.differ and not full.unresolved and full.effect > 0 and full.window > 2


@pytest.mark.contract
def test_explain_prints_a_decisions_two_arms_side_by_side(played, tmp_path, capsys):
    batch, _, servers = played
    endpoint = {"model": "scripted", "constrained": "none"}
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(yaml.safe_dump({"game": {"name": "game", "base_url": servers[0].base_url, **endpoint},
                                         "memory": {"name": "memory", "base_url": servers[1].base_url, **endpoint}}))
    args = ["curate", "--game", GAME, "--batch", str(batch), "--endpoints", str(endpoints),
            "--score-window", str(HORIZON), "--replay-horizon", str(K)]
    assert cli_main([*args, "--explain", f"{EPISODE}:1"]) == 0
    shown = capsys.readouterr().out
    assert "as made" in shown and "ablated" in shown and "<|APPEND|>notes.txt|key: east wing" in shown
    assert f"{EPISODE}/step1/log: effect +50 progression" in shown
    assert (f"{EPISODE}/step1/plan: the arms' play never diverged up to the last read of its content: effect exactly "
            "0") in " ".join(shown.split())
    assert cli_main([*args, "--explain", f"{EPISODE}:1"]) == 0  # the same replay prints the same figures
    assert f"{EPISODE}/step1/log: effect +50 progression" in capsys.readouterr().out
    assert cli_main([*args, "--explain", f"{EPISODE}:40"]) == 2
    assert "no memory decision at step 40: decisions are at steps 0, 1, 2" in " ".join(capsys.readouterr().out.split())
