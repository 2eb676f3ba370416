"""The embedded llama.cpp server honours a grammar, and stops when the process that started it is killed."""

import asyncio

import pytest
from completions import _complete

from automem_dagster.llm import (
    EndpointConfig,
    LLMClient,
)


@pytest.mark.integration
def test_embedded_server_honours_grammar(embedded):
    cfg = EndpointConfig(name="game", base_url="unused", server="llama.cpp", max_tokens=20)
    comp = _complete(LLMClient(cfg, embedded.base_url), grammar='root ::= "<|ACTION|>" ("noop" | "do") "<|END|>"')
    assert comp.text in ("<|ACTION|>noop<|END|>", "<|ACTION|>do<|END|>")
    assert comp.input_tokens > 0 and comp.output_tokens > 0


@pytest.mark.parametrize("parent_sigterm", ["default", "ignored"])
@pytest.mark.server
def test_a_server_stops_when_the_process_that_started_it_is_killed(tmp_path, parent_sigterm):
    """A rollout or test killed by SIGKILL cannot run its cleanup; the server must still go, also when
    the parent ignores SIGTERM (as under ``nohup ... &`` once Dagster has mapped SIGTERM to SIGINT)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    rules = tmp_path / "rules.json"
    rules.write_text("[]")
    ignore = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if parent_sigterm == "ignored" else ""
    starter = (f"{ignore}from automem_dagster.standins.scripted_server import scripted_server\n"
               f"s = scripted_server({str(rules)!r}, {str(tmp_path / 'server.log')!r}).start()\n"
               "print(s.pid, flush=True)\nimport time; time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            return
        if open(f"/proc/{server_pid}/stat").read().split()[2] == "Z":   # exited, waiting to be reaped by init
            return
        time.sleep(0.2)
    os.killpg(server_pid, signal.SIGKILL)
    pytest.fail(f"server {server_pid} outlived its killed parent by 15 s")



@pytest.mark.integration
def test_the_progress_watch_reads_the_real_servers_slots_moving(embedded):
    """What ``llm/progress.py`` reads of the real server (xllamacpp's llama.cpp): ``GET /slots`` answers,
    and while a call of 40 words or more runs its counters move (``n_decoded`` grows), which is what keeps a slow
    call waited for. Timing-free: the snapshots are compared, not the seconds (the stand-in's contract
    test, test_slow_server.py, plays the timeout itself)."""
    import aiohttp

    cfg = EndpointConfig(name="game", base_url="unused", server="llama.cpp", max_tokens=150, timeout_s=600)
    client = LLMClient(cfg, embedded.base_url)

    async def go():
        seen = []
        call = asyncio.ensure_future(client.complete([{"role": "user", "content": "hi"}], 'root ::= ("cat "){40}'))
        async with aiohttp.ClientSession() as session:
            while not call.done():
                seen.append(await client.progress.snapshot(session))
                await asyncio.sleep(0.05)
        await client.close()
        return call.result(), seen

    comp, seen = asyncio.run(go())
    decoded = [max(s[4] or 0 for s in snap) for snap in seen if snap is not None]
    assert comp.output_tokens >= 40 and client.progress.available
    assert None not in seen and len(set(decoded)) >= 2 and max(decoded) >= 20
