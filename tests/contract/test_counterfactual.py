"""Counterfactual credit, and curation checked against a known answer (not the paper's result).

The key-and-door game (the built-in ``keydoor``, played as ``keydoor:hall5-decoys0``: no decoys, so
the scripted notes below are the only ones) shows the key's wing once; only a note of it, read at the
junction, gets the agent through the door. Its scripted model (``standins/keydoor_rules.py``, served by the
scripted stand-in) acts on what its PLAN read shows and writes junk beside the useful note. So
which decisions matter is known in advance, and the method must find exactly those.
"""

import asyncio
import json
import re
from pathlib import Path

import pytest
import yaml
from builders import scripted_client

from automem_dagster.cli import main as cli_main
from automem_dagster.games.plugin import env_ref
from automem_dagster.llm.session import Clients
from automem_dagster.loop.report import curation_figures
from automem_dagster.meta.counterfactual import ReplayBudget, measure
from automem_dagster.meta.curate import CurationSettings, curate
from automem_dagster.meta.decisions import ScoreWeights, extract_decisions
from automem_dagster.rollout.runner import RolloutSpec, run_batch
from automem_dagster.rollout.trajectory import read_trajectory
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


def _known_answer(batch: Path) -> set[tuple[str, int, str]]:
    """The decisions that matter, by the game's design: the LOG that wrote the key's wing, and the
    PLAN at the junction (the first step there) whose read showed it."""
    out = set()
    for path in sorted((batch / "trajectories").glob("*.jsonl")):
        header, steps, _ = read_trajectory(path)
        junction = next(t for t, s in enumerate(steps) if s["observation"].startswith("[junction]"))
        out.add((header["episode"], junction, "plan"))
        for t, s in enumerate(steps):
            if any("key:" in r["op"] for turn in s["turns"] if turn["phase"] == "log" for r in turn["ops"]):
                out.add((header["episode"], t, "log"))
    return out


@pytest.mark.contract
def test_curation_keeps_the_key_decisions_a_check_against_a_known_answer(played, tmp_path):
    batch, scaffold, servers = played
    wings = {re.search(r"in the (\w+) wing", read_trajectory(p)[1][1]["observation"])[1]
             for p in (batch / "trajectories").glob("*")}
    assert len(wings) == 2, f"the seeds must put the key in both wings: {wings}"
    settings = CurationSettings(weights=ScoreWeights(horizon=HORIZON), accept_score=0.0, review_floor=0.0,
                                min_examples=1, max_repeats=50, episode_balance=10.0,
                                replay=ReplayBudget(decisions=100, horizon=K))
    out = tmp_path / "dataset"
    result = with_clients(servers, lambda clients: curate([batch], scaffold, [900, 901], out, settings, None, print,
                                                          clients))
    decisions = [json.loads(line) for line in (out / "decisions.jsonl").read_text().splitlines()]
    known = _known_answer(batch)
    kept = [d for d in decisions if d["verdict"] in ("accepted", "reviewed_kept")]
    right = [d for d in kept if (d["episode"], d["step"], d["phase"]) in known]
    precision = len(right) / len(kept)
    cheap = [d for d in decisions if d["cheap_verdict"] == "accepted"]
    cheap_right = sum((d["episode"], d["step"], d["phase"]) in known for d in cheap) / max(1, len(cheap))
    print(f"known-answer check (key and door, {len(SEEDS)} episodes): kept {len(kept)} decisions, precision "
          f"{precision:.2f} ({len(right)} of the known key decisions); the cheap score alone would keep "
          f"{len(cheap)} at precision {cheap_right:.2f}; calibration {result.stats['calibration']}")
    assert precision >= 0.9
    # every key decision is kept, or left out only as an exact repeat of a kept one (the same wing's note)
    found = {(d["episode"], d["step"], d["phase"]) for d in decisions if d["verdict"] in ("accepted", "duplicate")}
    assert found == known
    for d in decisions:
        if d["replayed"] is None:
            continue
        junk = d["phase"] == "log" and not any("key:" in op for op in d["ops"])
        if (d["episode"], d["step"], d["phase"]) in known:
            assert d["replayed"]["effect"] > 0, d
        elif junk:
            assert d["replayed"]["effect"] == 0 and not d["replayed"]["differ"], d
    calibration = result.stats["calibration"]
    assert calibration["replayed"] == sum(d["replayed"] is not None for d in decisions)
    assert set(result.stats["kept_effects"]["method"]) == {"replayed"}
    card = (out / "card.md").read_text()
    assert "## Calibration of the cheap score" in card and f"{calibration['replayed']} decisions replayed" in card
    assert (out / "effects.png").read_bytes()[:4] == b"\x89PNG"
    figures = curation_figures(out)  # what the training run logs to MLflow
    assert figures["curation.replayed"] == calibration["replayed"] and figures["curation.kept_replayed"] == len(kept)


@pytest.mark.contract
def test_a_decision_whose_arms_never_differ_scores_exactly_zero(played):
    batch, scaffold, servers = played
    path = next((batch / "trajectories").glob("*.jsonl"))
    decisions = extract_decisions(path, scaffold, ScoreWeights(horizon=HORIZON))
    junk = next(d for d in decisions if d.phase == "log" and d.ops and "key:" not in d.ops[0])
    effect = with_clients(servers, lambda clients: measure(junk, scaffold, clients,
                                                           ReplayBudget(decisions=1, horizon=K, pairs=2)))
    made, ablated = effect.arms[0]["made"], effect.arms[0]["ablated"]
    assert [s["action"] for s in made["steps"]] == [s["action"] for s in ablated["steps"]]
    assert made["steps"][0]["memory"] != ablated["steps"][0]["memory"]  # the write was ablated, yet nothing changed
    assert effect.effect == 0.0 and effect.gain == 0.0 and not effect.differ


@pytest.mark.contract
def test_explain_prints_a_decisions_two_arms_side_by_side(played, tmp_path, capsys):
    batch, _, servers = played
    endpoint = {"model": "scripted", "constrained": "none"}
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(yaml.safe_dump({"game": {"name": "game", "base_url": servers[0].base_url, **endpoint},
                                         "memory": {"name": "memory", "base_url": servers[1].base_url, **endpoint}}))
    args = ["curate", "--game", GAME, "--batch", str(batch), "--endpoints", str(endpoints),
            "--horizon", str(HORIZON), "--replay-horizon", str(K)]
    assert cli_main([*args, "--explain", f"{EPISODE}:1"]) == 0
    shown = capsys.readouterr().out
    assert "as made" in shown and "ablated" in shown and "<|APPEND|>notes.txt|key: east wing" in shown
    assert f"{EPISODE}/step1/log: effect +50 progression" in shown
    assert f"{EPISODE}/step1/plan: the arms' actions never differed: effect exactly 0" in " ".join(shown.split())
    assert cli_main([*args, "--explain", f"{EPISODE}:1"]) == 0  # the same replay prints the same figures
    assert f"{EPISODE}/step1/log: effect +50 progression" in capsys.readouterr().out
    assert cli_main([*args, "--explain", f"{EPISODE}:40"]) == 2
    assert "no memory decision at step 40: decisions are at steps 0, 1, 2" in " ".join(capsys.readouterr().out.split())
