"""A model server that fails to start names its log and what to do."""

from __future__ import annotations

import sys

import pytest

from automem_dagster.llm.process import ServerProcess, ServerStartError, free_port


@pytest.mark.server
def test_a_server_that_fails_to_start_names_its_log_and_what_to_do(tmp_path):
    log = tmp_path / "server.log"
    code = "import sys; print('error: model file not found', flush=True); sys.exit(3)"
    server = ServerProcess([sys.executable, "-c", code], free_port(), log, "test server")
    with pytest.raises(ServerStartError, match=rf"test server exited with code 3 while starting; see {log} "
                                               r"\(the usual causes .*rerun the same command") as caught:
        server.start(wait_s=30)
    assert "model file not found" in str(caught.value)
