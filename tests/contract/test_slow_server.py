"""A slow llama.cpp server is waited for while its slots show progress; a hung one still times out.

The scripted stand-in answers ``GET /slots`` in llama.cpp's shape (``standins/scripted_slots.py``): a
rule's ``delay_s`` is a hung request unless ``decode_tps`` makes its ``n_decoded`` grow, as a loaded
server's does. The endpoint's timeout (0.5 s) is far below the delay (2 s) and retries are off, so
before the progress watch (``llm/progress.py``) the slow call ended the episode.
"""

import pytest
import yaml
from builders import endpoints_file, with_routine

from automem_dagster.cli import main as cli_main
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.gate import paired_verdict
from automem_dagster.rollout import load_summary, read_trajectory
from automem_dagster.scaffold import scaffold_yaml

REPLIES = [{"match": "Phase: LOG", "reply": "<|APPEND|>actions_log.txt|moved\n<|DONE|>"},
           {"match": "Phase: PLAN", "reply": "<|ACTION|>east<|END|>"}]


def _rollout(tmp_path, scripted, slow: dict, out: str) -> tuple[int, object]:
    scaffold = tmp_path / "v0.yaml"
    scaffold.write_text(scaffold_yaml(with_routine("minihack", log_every=1)))
    server = scripted([{"match": "Step 2. Your previous action", "delay_s": 2.0, "reply": "<|DONE|>", **slow}, *REPLIES])
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", server, ("game",), max_retries=0, timeout_s=0.5)
    config = yaml.safe_load(endpoints.read_text())
    config["game"]["server"] = "llama.cpp"       # what the stand-in imitates, /slots included
    endpoints.write_text(yaml.safe_dump(config))
    rc = cli_main(["rollout", "--game", "minihack:Corridor-R3", "--seeds", "42", "--rollout-max-steps", "4",
                   "--endpoints", str(endpoints), "--out", str(tmp_path / out), "--concurrency", "1",
                   "--scaffold", str(scaffold)])
    return rc, tmp_path / out


def test_a_server_slower_than_the_timeout_but_decoding_finishes_the_episode(tmp_path, scripted):
    rc, out = _rollout(tmp_path, scripted, {"decode_tps": 20}, "slow")
    assert rc == 0
    summary = load_summary(out)
    assert [e.seed for e in summary.episodes] == [42] and summary.unfinished == []
    assert summary.retries.retries == 0
    _, steps, _ = read_trajectory(next((out / "trajectories").glob("*.jsonl")))
    waited = steps[2]["turns"][0]
    assert waited["attempts"] == 1 and waited["latency_s"] >= 2.0      # four times the timeout, one attempt


def test_a_hung_server_still_times_out_and_the_batch_lists_the_episode_as_unfinished(tmp_path, scripted, capsys):
    rc, out = _rollout(tmp_path, scripted, {}, "hung")
    assert rc != 0
    assert "1 × timeout" in capsys.readouterr().err
    summary = load_summary(out)
    assert summary.episodes == [] and summary.unfinished == [42]
    with pytest.raises(RoundError, match=r"unfinished episodes \(seeds \[42\]"):
        paired_verdict(summary, summary, "candidate")
