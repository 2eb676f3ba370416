"""The measured noise floor (``loop.noise``, ``automem noise``): an A/A evaluation of the champion on
real Crafter episodes (2 seeds x 4 steps) against the scripted OpenAI-compatible server, stored per
game and batch identity beside the lineage, and quoted by the decisions that follow."""

import json
from pathlib import Path

import pytest
import yaml
from builders import cli_storage

from automem_dagster import cli
from automem_dagster.loop.evaluation import champion_arms, evaluation_spec, stored_noise
from automem_dagster.loop.noise import differing_seeds, load_noise, measure_noise
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.structure import load_verdict
from automem_dagster.options import Budget
from automem_dagster.rollout.summary import summarize_batch
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.scaffold import content_hash, load_scaffold, save_scaffold

SETTINGS = StructureConfig(budget=Budget(eval_max_steps=4, eval_episodes=2)).for_game("crafter")
EAST = [{"match": "Phase: LOG", "reply": "<|DONE|>"}, {"match": "", "reply": "<|ACTION|>move_east<|END|>"}]


@pytest.fixture
def storage(tmp_path, monkeypatch):
    return cli_storage(tmp_path, monkeypatch)


def endpoints_of(server, tmp_path) -> Path:
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(yaml.safe_dump({"game": {"name": "game", "base_url": server.base_url, "model": "scripted",
                                                  "constrained": "none"}}))
    return endpoints


def noise(endpoints: Path, capsys) -> str:
    capsys.readouterr()
    assert cli.main(["noise", "--game", "crafter", "--eval-episodes", "2", "--eval-max-steps", "4",
                     "--endpoints", str(endpoints)]) == 0
    return capsys.readouterr().out


def test_automem_noise_stores_a_bit_identical_floor_beside_the_lineage_and_reads_it_back(storage, scripted, tmp_path,
                                                                                        capsys):
    endpoints = endpoints_of(scripted(EAST), tmp_path)
    out = noise(endpoints, capsys)
    assert "noise floor 0.00 points (one A/A pair, bootstrap over its 2 seeds, bit-identical replays)" in out
    assert "cost: 2 replayed episodes, 8 steps" in out
    [stored] = (storage.lineage.parent / "noise" / "crafter").glob("*.json")
    record = json.loads(stored.read_text())
    assert record["bit_identical"] and record["differing_seeds"] == [] and record["points"] == 0.0
    first = evaluation_spec(SETTINGS, load_scaffold("crafter", 0, storage.scaffolds), storage)
    assert record["first_batch"] == str(first.out_dir) and record["replay_batch"].endswith("-replay-aa")
    assert stored.stem == json.loads((first.out_dir / "batch.json").read_text())["identity"]["digest"]
    assert "stored in" in noise(endpoints, capsys)            # measured once per identity: read back, not replayed
    # bit-identical A/A: a round may reuse the champion's batch (and its decision says so)
    assert list(champion_arms(first, "v1", storage)) == ["champion"]


def test_a_replay_that_differs_is_no_bit_identical_a_a_and_rounds_play_the_champion_again(storage, scripted, tmp_path,
                                                                                         capsys):
    endpoints = endpoints_of(scripted(EAST), tmp_path)
    first = evaluation_spec(SETTINGS, load_scaffold("crafter", 0, storage.scaffolds), storage)
    # no A/A measured for the identity: the round plays the champion batch and a replay of it
    assert list(champion_arms(first, "v1", storage)) == ["champion", "champion_replay"]
    noise(endpoints, capsys)
    played, replay = summarize_batch(first.out_dir), summarize_batch(Path(f"{first.out_dir}-replay-aa"))
    path = finished_episodes(replay.out_dir)[0]
    lines = path.read_text().splitlines()
    step = json.loads(lines[2])
    step["turns"][-1]["text"] = step["turns"][-1]["text"] + " "   # one model turn said something else
    lines[2] = json.dumps(step)
    path.write_text("\n".join(lines) + "\n")
    assert differing_seeds(Path(played.out_dir), Path(replay.out_dir)) == [json.loads(lines[0])["seed"]]
    record = measure_noise(played, replay, storage)
    assert not record.bit_identical and load_noise(storage, played) == record
    assert stored_noise(first, storage) == record
    arms = champion_arms(first, "v1", storage)
    assert list(arms) == ["champion_replay"] and str(arms["champion_replay"].out_dir).endswith("-replay-v1")


def decide_candidate(storage, endpoints: Path, capsys) -> None:
    """``automem revise``, the CLI round, resuming a pending candidate v1 (another plan prompt) on 2 seeds x 4 steps."""
    champion = load_scaffold("crafter", 0, storage.scaffolds)
    candidate = champion.model_copy(update={"version": 1, "parent": 0, "plan_prompt": champion.plan_prompt + " Go."})
    save_scaffold(candidate, storage.scaffolds)
    with storage.update_lineage("crafter") as lineage:
        lineage.record_candidate(1, 0, content_hash(candidate), None)
    capsys.readouterr()
    assert cli.main(["revise", "--game", "crafter", "--eval-episodes", "2", "--eval-max-steps", "4",
                     "--endpoints", str(endpoints), "--no-tracking"]) == 0


def test_the_first_decision_without_a_floor_replays_the_champion_and_measures_it(storage, scripted, tmp_path, capsys):
    decide_candidate(storage, endpoints_of(scripted(EAST), tmp_path), capsys)
    record = load_verdict(storage, "crafter", 1)
    assert record.noise["floor"] == 0.0 and record.noise["bit_identical"]      # measured by this round
    first = evaluation_spec(SETTINGS, load_scaffold("crafter", 0, storage.scaffolds), storage)
    assert stored_noise(first, storage).replay_batch == f"{first.out_dir}-replay-v1"
    # the replay repeated the first play bit for bit: the first play is the batch every round reuses
    assert record.champion_batch == str(first.out_dir) and "bit-identical" in record.noise["champion_play"]


def test_a_decision_quotes_the_stored_floor_and_says_the_champion_batch_was_reused(storage, scripted, tmp_path, capsys):
    endpoints = endpoints_of(scripted(EAST), tmp_path)
    noise(endpoints, capsys)
    decide_candidate(storage, endpoints, capsys)
    record = load_verdict(storage, "crafter", 1)
    assert record.noise["floor"] == 0.0 and record.noise["bit_identical"]
    assert "noise floor 0.00 points (one A/A pair, bootstrap over its 2 seeds, bit-identical replays)" in record.reason
    assert "batch reused: this identity's A/A replays were bit-identical" in record.noise["champion_play"]
    assert record.outcome == "inconclusive"        # two seeds: no gate decides on them
