"""A MiniHack suite's decision pairs on (task, seed): an evaluation of 2 tasks x 2 seeds is 4 pairs in the
gate's decision, where one task gave 2. Played on real MiniHack episodes (2 steps each) against the scripted
OpenAI-compatible server, through ``automem evaluate`` and ``automem decide`` as a user runs them."""

import json

from builders import cli_storage, endpoints_file

from automem_dagster import cli
from automem_dagster.loop.structure import load_verdict
from automem_dagster.rollout.trajectory import finished_episodes, read_trajectory
from automem_dagster.scaffold import content_hash, load_scaffold, save_scaffold

SUITE = "minihack:Corridor-R3+MazeWalk-9x9"
NORTH = [{"match": "Phase: LOG", "reply": "<|DONE|>"}, {"match": "", "reply": "<|ACTION|>north<|END|>"}]


def test_a_suite_evaluation_of_two_tasks_by_two_seeds_decides_on_four_pairs(scripted, tmp_path, monkeypatch):
    storage = cli_storage(tmp_path, monkeypatch)
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", scripted(NORTH), roles=("game",))
    champion = load_scaffold("minihack", 0, storage.scaffolds)
    candidate = champion.model_copy(update={"version": 1, "parent": 0, "plan_prompt": champion.plan_prompt + " Go."})
    save_scaffold(candidate, storage.scaffolds)
    with storage.update_lineage("minihack") as lineage:
        lineage.record_candidate(1, 0, content_hash(candidate), None)
    batches = {}
    for version in ("v1", "v0"):  # each evaluated, then decided by the one deciding command (DVC's decide stage)
        batches[version] = tmp_path / "evaluate" / version
        assert cli.main(["evaluate", "--game", SUITE, "--scaffold", version, "--eval-episodes", "4", "--eval-max-steps", "2",
                         "--endpoints", str(endpoints), "--out", str(batches[version]), "--no-tracking"]) == 0
    assert cli.main(["decide", "--role", "candidate", "--challenger", str(batches["v1"]), "--champion", str(batches["v0"]),
                     "--record", str(tmp_path / "decision.json"), "--progression", str(tmp_path / "progression.json"),
                     "--behaviour", str(tmp_path / "behaviour.json")]) == 0
    record = load_verdict(storage, SUITE, 1)
    assert record.comparison["n"] == 4 and record.outcome == "inconclusive"
    batch = batches["v1"]
    headers = [read_trajectory(path) for path in finished_episodes(batch)]
    assert sorted(h["seed"] for h, _, _ in headers) == [42, 43, 142, 143]
    assert {steps[0]["info"]["env_id"] for _, steps, _ in headers} == {"MiniHack-Corridor-R3-v0",
                                                                      "MiniHack-MazeWalk-9x9-v0"}
    assert json.loads((batch / "batch.json").read_text())["game"] == SUITE
