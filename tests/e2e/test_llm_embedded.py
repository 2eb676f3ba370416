"""The embedded llama.cpp server honours a grammar, and stops when the process that started it is killed."""

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
