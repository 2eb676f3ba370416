"""Batches: valid trajectory files, summaries, resume after a killed process, clear failures."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from builders import endpoints_file

from automem_dagster.cli import main as cli_main
from automem_dagster.rollout import TrajectoryError, load_summary, read_trajectory, summarize_batch

# Replies depend only on the request, so a replayed episode gets the same ones.
RULES = [
    {"match": "Phase: LOG", "reply": "<|APPEND|>actions_log.txt|moved\n<|DONE|>"},
    {"match": "Step 2. Your previous", "reply": "<|ACTION|>bogus<|END|>"},
    {"match": "Step 4. Your previous", "reply": "<|ACTION|>south<|END|>"},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>east<|END|>"},
]


def _endpoints(tmp_path, server):
    return endpoints_file(tmp_path / "endpoints.yaml", server, ("game",), max_retries=1)


def _rollout_args(endpoints, out, seeds="42-44", steps=12, extra=()):
    return ["rollout", "--game", "minihack:Corridor-R3", "--seeds", seeds, "--rollout-max-steps", str(steps),
            "--endpoints", str(endpoints), "--out", str(out), "--concurrency", "1", *extra]


def _episodes(out):
    """Per episode: the sequence of (observation, action, progression) — what must be reproduced."""
    result = {}
    for path in sorted((out / "trajectories").glob("*.jsonl")):
        _, steps, end = read_trajectory(path)
        result[path.name] = ([(s["observation"], s["action"], s["progression"]) for s in steps], end["progression"])
    return result


def test_batch_writes_complete_trajectories_and_summary(tmp_path, scripted):
    server = scripted(RULES)
    out = tmp_path / "batch"
    assert cli_main(_rollout_args(_endpoints(tmp_path, server), out, seeds="42,43", steps=6)) == 0
    files = sorted((out / "trajectories").iterdir())
    assert [f.name for f in files] == ["minihack-Corridor-R3__seed42.jsonl", "minihack-Corridor-R3__seed43.jsonl"]
    header, steps, end = read_trajectory(files[0])
    assert header["seed"] == 42 and header["scaffold"]["version"] == 0 and "api_key" not in json.dumps(header)
    assert len(steps) == end["steps"] == 6
    first = next(s for s in steps if s["turns"][0]["phase"] == "log")   # by step LOG_EVERY at the latest
    assert {"observation", "action", "action_valid", "reward", "progression", "turns", "state", "wall_s"} <= first.keys()
    assert first["turns"][0]["ops"][0]["op"] == "<|APPEND|>actions_log.txt|moved"
    assert [s["action_valid"] for s in steps] == [True, True, False, True, True, True]
    assert "held no valid action" in steps[3]["observation"] and steps[2]["action"] == "search"
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["episodes"]) == 2 and summary["behaviour"]["invalid_action_rate"] == pytest.approx(2 / 12)
    assert (out / "memory" / "minihack-Corridor-R3__seed42" / "journal.jsonl").exists()


def test_killed_batch_resumes_to_the_same_trajectories(tmp_path, scripted):
    server = scripted([{**rule, "delay_s": 0.03} for rule in RULES])
    endpoints = _endpoints(tmp_path, server)
    reference = tmp_path / "reference"
    assert cli_main(_rollout_args(endpoints, reference)) == 0

    out = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "automem_dagster.cli", *_rollout_args(endpoints, out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    trajectories = out / "trajectories"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        finished = list(trajectories.glob("*.jsonl")) if trajectories.exists() else []
        partial = list(trajectories.glob("*.partial")) if trajectories.exists() else []
        if finished and partial and partial[0].read_text().count('"type": "step"') >= 2:
            break
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {p.name: p.stat().st_mtime_ns for p in trajectories.glob("*.jsonl")}
    assert 1 <= len(done_before) < 3 and list(trajectories.glob("*.partial"))

    assert cli_main(_rollout_args(endpoints, out)) == 0
    assert _episodes(out) == _episodes(reference)
    assert not list(trajectories.glob("*.partial"))
    for name, mtime in done_before.items():                     # finished episodes were not redone
        assert (trajectories / name).stat().st_mtime_ns == mtime


def test_a_batch_directory_refuses_other_settings(tmp_path, scripted, capsys):
    endpoints = _endpoints(tmp_path, scripted(RULES))
    assert cli_main(_rollout_args(endpoints, tmp_path / "b", seeds="42", steps=3)) == 0
    assert cli_main(_rollout_args(endpoints, tmp_path / "b", seeds="42", steps=4)) == 2
    assert "different max_steps" in capsys.readouterr().err


@pytest.mark.contract
def test_dead_endpoint_fails_clearly_and_keeps_what_finished(tmp_path, capsys):
    from automem_dagster.llm.process import free_port

    endpoints = tmp_path / "dead.yaml"
    endpoints.write_text(f"game: {{name: game, base_url: 'http://127.0.0.1:{free_port()}/v1', constrained: none, "
                         "max_retries: 1, timeout_s: 2}\n")
    assert cli_main(_rollout_args(endpoints, tmp_path / "dead", seeds="42", steps=3)) == 2
    shown = capsys.readouterr()
    for stream in (shown.err, shown.out):
        assert "Fix the endpoint, then rerun the same command" in " ".join(stream.split())
    assert "endpoint 'game' at http://127.0.0.1:" in shown.out and "2 × connection" in shown.out
    assert list((tmp_path / "dead" / "trajectories").glob("*.partial"))


def test_corrupted_trajectory_is_named(tmp_path, scripted):
    endpoints = _endpoints(tmp_path, scripted(RULES))
    out = tmp_path / "c"
    assert cli_main(_rollout_args(endpoints, out, seeds="42", steps=3)) == 0
    path = next((out / "trajectories").glob("*.jsonl"))
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1][:40], *lines[2:]]) + "\n")
    with pytest.raises(TrajectoryError, match=r"line 2 is not JSON.*delete it and rerun"):
        summarize_batch(out)
    path.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(TrajectoryError, match="incomplete"):
        read_trajectory(path)


def test_a_summary_is_read_back_without_rewriting_it(tmp_path, scripted):
    endpoints = _endpoints(tmp_path, scripted(RULES))
    out = tmp_path / "s"
    assert cli_main(_rollout_args(endpoints, out, seeds="42,43", steps=3)) == 0
    written = out / "summary.json"
    before = (written.read_bytes(), written.stat().st_mtime_ns)
    assert load_summary(out) == summarize_batch(tmp_path / "s") and written.read_bytes() == before[0]
    written.unlink()
    assert load_summary(out).progression.n == 2 and written.exists()   # rebuilt from the trajectories
    mtime = written.stat().st_mtime_ns
    load_summary(out)
    assert written.stat().st_mtime_ns == mtime


def test_episodes_played_at_once_are_pinned_to_distinct_llama_cpp_slots(tmp_path, scripted):
    """Each running episode holds a lane; on a server whose slots the client knows, every call of
    the episode carries ``id_slot`` = lane % slots, so two episodes at once use slots 0 and 1 and
    one at a time uses slot 0 only (``benchmarks/slot_cache.py`` measures why)."""
    import asyncio

    from automem_dagster.llm import EndpointConfig, LLMClient
    from automem_dagster.llm.session import Clients
    from automem_dagster.rollout import RolloutSpec, run_batch
    from automem_dagster.scaffold import load_scaffold

    def slots_used(concurrency):
        server = scripted(RULES)
        client = LLMClient(EndpointConfig(name="game", base_url="x", server="llama.cpp", constrained="none"),
                           server.base_url, slots=2)
        spec = RolloutSpec("minihack:Corridor-R3", load_scaffold("minihack", 0), [42, 43], 3,
                           tmp_path / f"c{concurrency}", concurrency)

        async def go():
            try:
                await run_batch(spec, Clients(client, None, None))
            finally:
                await client.close()

        asyncio.run(go())
        return {json.loads(line)["body"].get("id_slot") for line in server.request_log.read_text().splitlines()}

    assert slots_used(2) == {0, 1} and slots_used(1) == {0}


def test_one_progress_bar_per_batch_with_episodes_steps_and_an_eta(tmp_path, scripted):
    import asyncio
    import io

    from rich.console import Console
    from rich.text import Text

    from automem_dagster.commands.rollout_view import batch_bars
    from automem_dagster.llm.config import load_endpoints
    from automem_dagster.llm.session import connect
    from automem_dagster.paths import SCAFFOLDS
    from automem_dagster.rollout import RolloutSpec, run_batch
    from automem_dagster.scaffold import load_scaffold_file

    config = load_endpoints(_endpoints(tmp_path, scripted(RULES)))
    scaffold = load_scaffold_file(SCAFFOLDS / "minihack" / "v0.yaml")
    out, screen = tmp_path / "b", io.StringIO()

    async def play(seeds: list[int]):
        async with connect(config, tmp_path) as clients:
            return await run_batch(RolloutSpec("minihack:Corridor-R3", scaffold, seeds, 5, out), clients, bars)

    with batch_bars(Console(file=screen, force_terminal=True, width=160)) as bars:
        asyncio.run(play([42]))
        asyncio.run(play([42, 43, 44]))          # seed 42 is finished already: no work of this run
        first, second = bars.bars.tasks
        asyncio.run(play([42, 43, 44]))          # every episode played before: a reused batch, no bar
        assert len(bars.bars.tasks) == 2
    assert (first.description, first.total, first.completed, first.fields) == (
        "minihack:Corridor-R3 v0", 5, 5, {"episodes": "1/1 episodes"})
    assert (second.total, second.completed, second.fields) == (10, 10, {"episodes": "3/3 episodes"})
    assert second.finished and "ETA" in screen.getvalue()
    plain = Text.from_ansi(screen.getvalue()).plain
    lines = [line for line in plain.splitlines() if "finished after" in line]
    assert len(lines) == 3 and "minihack-Corridor-R3__seed43: finished after 5 steps" in " ".join(lines)
    assert "minihack:Corridor-R3 v0: reused, all 3 episodes were played before" in plain
    assert "0/0 steps" not in plain
