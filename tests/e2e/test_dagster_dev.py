"""``dagster dev`` loads the project's definitions and serves the asset graph over GraphQL.

Started the way docs/install.md's notes say it stops cleanly: Popen in its own session, DAGSTER_HOME in a
tmp dir, stopped by its process group (SIGTERM, then SIGKILL if it lingers).
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from automem_dagster.llm.process import free_port

DAGSTER = Path(sys.executable).parent / "dagster"
ASSETS_QUERY = "{ assetNodes { assetKey { path } groupName } }"


def _get(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(url, data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def _group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    return False


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the whole group (webserver, daemon, code servers), SIGKILL to whatever lingers.

    ``dagster dev`` exits on SIGTERM within seconds, but its code server can outlive it until
    its heartbeat times out (45 s), so the group, not only the leader, is waited for.
    """
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if _group_gone(process.pid, wait):
            break
    process.wait(timeout=10)


@pytest.mark.integration
@pytest.mark.server
def test_dagster_dev_serves_the_asset_graph(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    port = free_port()
    log = (tmp_path / "dagster_dev.log").open("w")
    process = subprocess.Popen(
        [str(DAGSTER), "dev", "-m", "automem_dagster.defs", "-h", "127.0.0.1", "-p", str(port)],
        cwd=tmp_path, env={**os.environ, "DAGSTER_HOME": str(home)}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _get(f"{base}/server_info"):
            assert process.poll() is None, (tmp_path / "dagster_dev.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "dagster dev did not answer /server_info within 120 s"
            time.sleep(1)
        # The webserver answers before the code location has loaded; poll until the assets are there.
        while True:
            nodes = _graphql(f"{base}/graphql", ASSETS_QUERY).get("data", {}).get("assetNodes") or []
            groups = {"/".join(n["assetKey"]["path"]): n["groupName"] for n in nodes}
            if groups or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert groups.get("rollout_batch") == "structure" and groups.get("champion_scaffold") == "structure"
        assert groups.get("candidate_evaluation") == "evaluation"
    finally:
        _stop(process)
        log.close()
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)
