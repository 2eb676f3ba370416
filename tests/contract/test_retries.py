"""Retries in the open: a faulty endpoint shows as retries by cause and time lost to them, in the
summary, the CLI table, MLflow's metrics and the Dagster metadata, while model latency stays the
answering attempt's.

The scripted server plays a faulty provider as OpenAI's client is documented to meet one
(openai-python README, "Retries": connection errors, 408, 409, 429 and >=500 are retried with a
short exponential backoff, and requests that time out are retried; "Timeouts"): HTTP 500 and
503, a 429 with ``Retry-After`` (OpenAI's rate-limit guide: wait what the header says), an
answer slower than the client's timeout, and a connection closed with no answer.
"""

import asyncio

import pytest
from builders import endpoints_file, scripted_client, with_routine

from automem_dagster.cli import main as cli_main
from automem_dagster.defs.metadata.tables import retries_table
from automem_dagster.llm.client import EndpointError, LLMClient
from automem_dagster.rollout import load_summary, read_trajectory
from automem_dagster.scaffold import scaffold_yaml

REPLIES = [
    {"match": "Phase: LOG", "reply": "<|APPEND|>actions_log.txt|moved\n<|DONE|>"},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>east<|END|>"},
]
FAULTS = [
    {"match": "Step 2. Your previous action", "status": 500, "times": 2},
    {"match": "Step 3. Your previous action", "status": 429, "error": "Rate limit reached",
     "headers": {"Retry-After": "1"}, "times": 1},
    {"match": "Step 4. Your previous action", "delay_s": 1.5, "times": 1, "reply": "too late"},
    {"match": "Step 5. Your previous action", "drop": True, "times": 1},
    {"match": "Phase: LOG", "status": 503, "every": 3},       # the 3rd, 6th and 9th LOG request, retries included
]


def test_a_faulty_endpoint_shows_as_retries_by_cause_and_time_lost(tmp_path, scripted, capsys):
    scaffold = tmp_path / "v0.yaml"   # a LOG every step, as FAULTS count them
    scaffold.write_text(scaffold_yaml(with_routine("minihack", log_every=1)))
    server = scripted(FAULTS + REPLIES)
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", server, ("game",), max_retries=3, timeout_s=0.5)
    out = tmp_path / "batch"
    assert cli_main(["rollout", "--game", "minihack:Corridor-R3", "--seeds", "42", "--rollout-max-steps", "8",
                     "--endpoints", str(endpoints), "--out", str(out), "--concurrency", "1",
                     "--scaffold", str(scaffold)]) == 0

    r = load_summary(out).retries
    assert r.by_cause == {"http_500": 2, "http_429": 1, "timeout": 1, "connection": 1, "http_503": 3}
    assert r.calls == 15 and r.retries == 8 and r.attempts == r.calls + r.retries
    assert r.attempts == len(server.request_log.read_text().splitlines())
    assert r.retry_s >= 1.0 + 0.5          # the 429's Retry-After and the timed-out attempt, at least
    assert r.model_s < r.retry_s           # the scripted model answers at once: the time went to retries

    _, steps, _ = read_trajectory(next((out / "trajectories").glob("*.jsonl")))
    waited = steps[3]["turns"][0]          # step 3's LOG turn: the 429, then the 3rd LOG request's 503
    assert waited["retries"] == {"http_429": 1, "http_503": 1} and waited["attempts"] == 3
    assert waited["retry_s"] >= 1.0 and waited["latency_s"] < 0.5
    assert sum(t["latency_s"] for s in steps for t in s["turns"]) == pytest.approx(r.model_s)

    causes = "1 × connection, 1 × HTTP 429, 2 × HTTP 500, 3 × HTTP 503, 1 × timeout"
    shown = capsys.readouterr().out
    rows = {tuple(cell.strip() for cell in line.strip("│ ").split("│")) for line in shown.splitlines()}
    assert {("retries", "8"), ("after HTTP 500", "2"), ("after HTTP 429", "1"), ("after HTTP 503", "3"),
            ("after timeout", "1"), ("after connection", "1"), ("attempts", "23")} <= rows
    assert ("time lost to retries s", f"{r.retry_s:.2f}") in rows and ("model latency s", f"{r.model_s:.2f}") in rows
    metrics = r.as_metrics()
    assert {k: metrics[k] for k in ("attempts", "retries", "retries_http_500", "retries_timeout")} == {
        "attempts": 23, "retries": 8, "retries_http_500": 2, "retries_timeout": 1}
    assert f"| v0 | 15 | 23 | {causes} | {r.retry_s:.2f} | {r.model_s:.2f} |" in retries_table({"v0": load_summary(out)})


async def _call(client: LLMClient):
    try:
        return await client.complete([{"role": "user", "content": "hi"}])
    finally:
        await client.close()


def test_a_call_that_gives_up_names_its_server_and_what_failed_how_often(scripted):
    server = scripted([{"match": "hi", "status": 500, "times": 2}, {"match": "hi", "drop": True}])
    with pytest.raises(EndpointError) as err:
        asyncio.run(_call(scripted_client(server, "game", base_url="unused", max_retries=2)))
    assert err.value.endpoint == "game" and err.value.base_url == server.base_url
    assert err.value.failures == {"http_500": 2, "connection": 1}
    assert "failed after 3 attempts (1 × connection, 2 × HTTP 500; last: APIConnectionError" in str(err.value)


def test_a_stopped_batch_says_which_server_failed_how_often_what_finished_and_how_to_resume(tmp_path, scripted,
                                                                                            capsys):
    server = scripted([{"match": "Step 3. ", "status": 500, "times": 3}, *REPLIES])
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", server, ("game",), max_retries=2)
    out = tmp_path / "batch"
    args = ["rollout", "--game", "minihack:Corridor-R3", "--seeds", "42,43", "--rollout-max-steps", "5",
            "--endpoints", str(endpoints), "--out", str(out), "--concurrency", "1"]
    assert cli_main(args) == 2
    report = capsys.readouterr().out                       # stdout, not only the error stream
    assert report.splitlines()[0] == "1 of 2 episodes failed:"
    assert (f"- endpoint 'game' at {server.base_url} gave up on 1 call after bounded retries: 3 failed attempts "
            "(3 × HTTP 500); last error: endpoint 'game' (") in report
    assert "failed after 3 attempts (3 × HTTP 500; last: InternalServerError: " in report
    assert (f"Kept: 1 finished episode in {out / 'trajectories'}; the unfinished ones resume at their last "
            "recorded step (seed 42 at step 3), replayed without model calls.") in report
    assert "Fix the endpoint, then rerun the same command to resume." in report
    assert f"Resume with: automem rollout --game minihack:Corridor-R3 --seeds 42,43 --rollout-max-steps 5 --endpoints " \
           f"{endpoints} --out {out} --concurrency 1" in report

    assert cli_main(args) == 0                             # the same command resumes and finishes
    assert [e.resumes[0]["at_step"] for e in load_summary(out).episodes if e.resumes] == [3]
