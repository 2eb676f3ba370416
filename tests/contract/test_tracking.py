"""The Tracker against an MLflow server that cannot be reached raises ``TrackingError``."""

import re
import socket
import time

import pytest
from evaluation_runs import evaluation

from automem_dagster.tracking import Tracker, TrackingError


@pytest.mark.contract
def test_unreachable_server_raises_tracking_error(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    start = time.monotonic()
    with pytest.raises(TrackingError, match=re.escape(uri)) as info:
        Tracker(uri).log_evaluation(evaluation(1))
    assert time.monotonic() - start < 10
    assert "mlflow server" in str(info.value) and "MLFLOW_TRACKING_URI" in str(info.value)
