"""An interrupted episode resumes at its last recorded step: the recorded actions are replayed
through the game and the journal through a fresh memory store, with no model call, and the
finished trajectory equals an uninterrupted one. A record that does not replay is played again
from step 0, and the trajectory, the summary and the log say why."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from builders import endpoints_file, with_routine

from automem_dagster.cli import main as cli_main
from automem_dagster.memory import FilePolicy
from automem_dagster.rollout import load_summary, read_trajectory
from automem_dagster.scaffold import load_scaffold
from automem_dagster.scaffold.io import scaffold_yaml

STEPS, STOP = 200, 120
ACTIONS = {
    "crafter": ["move_west", "move_east", "move_north", "move_south", "do", "noop", "move_east", "do", "move_north",
                "noop"],
    "nethack": ["north", "east", "south", "west", "search", "wait", "east", "far_west", "search", "north"],
    "minihack": ["north", "east", "south", "west", "search", "west", "south", "north", "search", "west"],
}
GAMES = [("crafter", "crafter"), ("nethack", "nethack"), ("minihack:Corridor-R3", "minihack")]
_STEP = re.compile(r"Step (\d+)[.:]")


def _rules(family: str, stop: int | None = None) -> list[dict]:
    """Replies that depend only on the request (the step's last digit picks the action), so a
    replayed or resumed episode gets the same ones; ``stop`` fails step ``stop``'s first request once."""
    fault = [{"match": f"Step {stop}. ", "status": 500, "times": 1}] if stop is not None else []
    log = [{"match": "Phase: LOG", "reply": "<|APPEND|>actions_log.txt|moved\n<|WRITE|>strategy.txt|keep going\n"
                                            "<|SEARCH|>actions_log.txt|moved\n<|DONE|>"}]
    plan = [{"match": f"{d}. Now:", "reply": f"<|ACTION|>{a}<|END|>"} for d, a in enumerate(ACTIONS[family])]
    return fault + log + plan


def _scaffold(tmp_path, game: str):
    """The game's v0 with what a replay must rebuild beside the model's files: a file the harness
    syncs from game state every step, and the stuck and oscillation warnings (agent history)."""
    scaffold = load_scaffold(game.split(":")[0], 0)
    synced = scaffold.files[-1].model_copy(update={"name": "status.txt", "purpose": "position and vitals",
                                                   "initial": "", "policy": FilePolicy(mode="synced",
                                                                                       sync_source="status")})
    signals = scaffold.signals.model_copy(update={
        "stuck": scaffold.signals.stuck.model_copy(update={"enabled": True}),
        "oscillation": scaffold.signals.oscillation.model_copy(update={"enabled": True})})
    path = tmp_path / "scaffold.yaml"
    path.write_text(scaffold_yaml(scaffold.model_copy(update={"files": [*scaffold.files, synced], "signals": signals})))
    return path


def _rollout(tmp_path, server, game, out, steps=STEPS, scaffold=None):
    """The rollout command of one seed, with ``scaffold`` (a path; default ``_scaffold``'s)."""
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", server, ("game",), max_retries=0)
    return ["rollout", "--game", game, "--seeds", "42", "--rollout-max-steps", str(steps), "--endpoints", str(endpoints),
            "--out", str(out), "--concurrency", "1", "--scaffold", str(scaffold or _scaffold(tmp_path, game))]


def _requests(server, skip: int = 0, until: int | None = None) -> list[dict]:
    """The bodies of the requests the scripted server received (those from ``skip`` to ``until``)."""
    return [json.loads(line)["body"] for line in server.request_log.read_text().splitlines()[skip:until]]


def _requested_steps(server, skip: int = 0) -> list[int]:
    """The step each request the scripted server received (after the first ``skip``) was for."""
    return [_step_of(body) for body in _requests(server, skip)]


def _step_of(body: dict) -> int:
    return int(_STEP.search(body["messages"][-1]["content"]).group(1))


def _request_count(server) -> int:
    return len(server.request_log.read_text().splitlines())


def _played(out) -> tuple[dict, list[dict], dict]:
    """The one trajectory of a batch, without what differs between runs (timings, dates)."""
    header, steps, end = read_trajectory(next((out / "trajectories").glob("*.jsonl")))
    for step in steps:
        del step["wall_s"], step["game_s"]
        for turn in step["turns"]:
            del turn["latency_s"], turn["retry_s"]
    del end["finished_at"]
    return header, steps, end


def _partial_steps(out) -> int:
    partial = next((out / "trajectories").glob("*.partial"))
    return sum(1 for line in partial.read_text().splitlines() if line.endswith("}") and '"type": "step"' in line)


@pytest.mark.parametrize(("game", "family"), GAMES)
def test_a_failed_episode_resumes_at_its_last_step_without_model_calls(tmp_path, scripted, game, family):
    server = scripted(_rules(family, stop=STOP))
    out = tmp_path / "interrupted"
    assert cli_main(_rollout(tmp_path, server, game, out)) == 2          # the endpoint fault stops the run
    assert _partial_steps(out) == STOP
    before = _request_count(server)

    assert cli_main(_rollout(tmp_path, server, game, out)) == 0
    header, steps, end = _played(out)
    assert [r["at_step"] for r in header["resumes"]] == [STOP] and "note" not in header["resumes"][0]
    resumed = _requested_steps(server, skip=before)
    assert min(resumed) == STOP                                          # no model call for a replayed step
    assert len(resumed) == sum(len(s["turns"]) for s in steps[STOP:])
    assert load_summary(out).episodes[0].resumes == header["resumes"]

    reference, resumed_at = tmp_path / "reference", _request_count(server)
    assert cli_main(_rollout(tmp_path, server, game, reference)) == 0
    ref_header, ref_steps, ref_end = _played(reference)
    assert steps == ref_steps and end == ref_end and "resumes" not in ref_header
    # The resumed agent asked exactly what the uninterrupted one asked: same memory index, history, warnings.
    asked = _requests(server, skip=before, until=resumed_at)
    assert asked == [b for b in _requests(server, skip=resumed_at) if _step_of(b) >= STOP]
    assert len(steps) > STOP and all("memory_sha" in s for s in steps)
    assert any(s["warnings"] for s in steps[STOP:])                      # the signals saw the replayed history


def test_a_killed_episode_resumes_where_its_record_ends(tmp_path, scripted):
    """SIGKILL at an arbitrary point: a step line may be cut short and the journal may run ahead
    of the trajectory; the rerun resumes at the last whole step line and replays the rest exactly."""
    server = scripted([{**rule, "delay_s": 0.01} for rule in _rules("minihack")])
    out, steps = tmp_path / "killed", 120
    args = _rollout(tmp_path, server, "minihack:Corridor-R3", out, steps)
    proc = subprocess.Popen([sys.executable, "-m", "automem_dagster.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (list(out.glob("trajectories/*.partial")) and _partial_steps(out) >= 40):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    recorded = _partial_steps(out)
    assert 40 <= recorded < steps
    before = _request_count(server)

    assert cli_main(args) == 0
    header, played, end = _played(out)
    assert [r["at_step"] for r in header["resumes"]] == [recorded]
    assert min(_requested_steps(server, skip=before)) == recorded
    reference = tmp_path / "reference"
    assert cli_main(_rollout(tmp_path, server, "minihack:Corridor-R3", reference, steps)) == 0
    assert (played, end) == _played(reference)[1:]


def test_a_record_that_does_not_replay_is_played_again_from_step_0(tmp_path, scripted, caplog):
    server = scripted(_rules("minihack", stop=12))
    out = tmp_path / "doctored"
    args = _rollout(tmp_path, server, "minihack:Corridor-R3", out, steps=20)
    assert cli_main(args) == 2
    partial = next((out / "trajectories").glob("*.partial"))
    lines = partial.read_text().splitlines()
    record = json.loads(lines[6])
    assert record["step"] == 5
    record["observation"] += "\nA door appears."                        # the game never showed this
    partial.write_text("\n".join([*lines[:6], json.dumps(record), *lines[7:]]) + "\n")
    before = _request_count(server)

    assert cli_main(args) == 0
    header, steps, end = _played(out)
    [resume] = header["resumes"]
    assert resume["at_step"] == 0
    assert re.search(r"not resumed: step 5: the replayed observation differs from the recorded one .*"
                     r"played again from step 0", resume["note"])
    assert min(_requested_steps(server, skip=before)) == 0               # every step asked the model again
    assert load_summary(out).episodes[0].resumes == [resume]
    assert any("not resumed: step 5" in r.getMessage() for r in caplog.records)
    assert not list((out / "memory").glob("*.interrupted"))

    reference = tmp_path / "reference"
    assert cli_main(_rollout(tmp_path, server, "minihack:Corridor-R3", reference, steps=20)) == 0
    assert (steps, end) == _played(reference)[1:]


def test_a_baseline_resumes_with_its_window_of_past_steps(tmp_path, scripted):
    """The window baseline keeps past steps in its prompt: a resumed one rebuilds them without a call."""
    rules = [{"match": "Step 12:", "status": 500, "times": 1},
             *({"match": f"{d}:", "reply": f"<|ACTION|>{a}<|END|>"} for d, a in enumerate(ACTIONS["minihack"]))]
    server = scripted(rules)
    out = tmp_path / "window"
    args = [*_rollout(tmp_path, server, "minihack:Corridor-R3", out, steps=30), "--agent", "window", "--window", "4"]
    assert cli_main(args) == 2
    before = _request_count(server)
    assert cli_main(args) == 0
    resumed_at = _request_count(server)
    assert [r["at_step"] for r in _played(out)[0]["resumes"]] == [12]
    reference = tmp_path / "reference"
    assert cli_main([*args[:args.index("--out") + 1], str(reference), *args[args.index("--out") + 2:]]) == 0
    asked = _requests(server, skip=before, until=resumed_at)
    assert [_step_of(b) for b in asked] == list(range(12, 30))
    assert asked == _requests(server, skip=resumed_at)[12:]
    assert _played(out)[1:] == _played(reference)[1:]


def test_a_resumed_episode_reuses_the_consultation_it_replayed(tmp_path, scripted):
    """Memory files the harness never rewrites: a consultation is reused while they are unchanged
    (``agent.savings``; the LOG rewrites the same line), and the LOG counter and the consultation to
    reuse are restored from the replayed steps, so the resumed episode asks exactly what the
    uninterrupted one asked."""
    server = scripted([{"match": f"Step {STOP}. ", "status": 500, "times": 1},
                       {"match": "Phase: LOG", "reply": "<|WRITE|>strategy.txt|keep going\n<|DONE|>"},
                       {"match": "unchanged since)", "reply": "<|ACTION|>do<|END|>"},
                       {"match": "Results:", "reply": "<|ACTION|>move_west<|END|>"},
                       {"match": "Phase: PLAN", "reply": "<|READ|>strategy.txt"}])
    scaffold = tmp_path / "v0.yaml"
    scaffold.write_text(scaffold_yaml(load_scaffold("crafter", 0)))

    def rollout(out):
        return cli_main(_rollout(tmp_path, server, "crafter", out, scaffold=scaffold))

    out = tmp_path / "interrupted"
    assert rollout(out) == 2 and _partial_steps(out) == STOP
    before = _request_count(server)
    assert rollout(out) == 0
    resumed_at = _request_count(server)
    assert rollout(tmp_path / "reference") == 0
    _, steps, end = _played(out)
    assert (steps, end) == _played(tmp_path / "reference")[1:]
    asked = _requests(server, skip=before, until=resumed_at)            # the step message is the first user one
    assert asked == [b for b in _requests(server, skip=resumed_at)
                     if int(_STEP.search(b["messages"][1]["content"]).group(1)) >= STOP]
    reused = [s.get("memory_context", {}).get("reused_consultation", {}).get("step") for s in steps]
    assert reused[STOP] is not None and reused[STOP] < STOP            # a consultation made before the interruption
    assert any(t["phase"] == "log" for s in steps[STOP:] for t in s["turns"])


def test_a_resumed_episode_keeps_its_scaffolds_routine(tmp_path, scripted):
    """A routine of a LOG every 3rd step and no other trigger, interrupted at step 7: the LOG counter is
    restored from the replayed steps under the scaffold's ``log_every`` (the last LOG was at step 6), so
    the resumed episode LOGs at step 9 as the uninterrupted one does, not at once at step 7."""
    stop, steps = 7, 11
    server = scripted([{"match": f"Step {stop}. ", "status": 500, "times": 1},
                       {"match": "Phase: LOG", "reply": "<|APPEND|>strategy.txt|noted\n<|DONE|>"},
                       {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"}])
    scaffold = tmp_path / "v0.yaml"
    scaffold.write_text(scaffold_yaml(with_routine("crafter", log_every=3, log_triggers=[], reuse_consultation=False)))

    def rollout(out):
        return cli_main(_rollout(tmp_path, server, "crafter", out, steps, scaffold))

    out = tmp_path / "interrupted"
    assert rollout(out) == 2 and _partial_steps(out) == stop
    assert rollout(out) == 0 and rollout(tmp_path / "reference") == 0
    _, played, _ = _played(out)
    assert played == _played(tmp_path / "reference")[1]
    assert [s["step"] for s in played if any(t["phase"] == "log" for t in s["turns"])] == [3, 6, 9]
