"""A pytest plugin for ``benchmarks/suite_cost.py``: each process that runs tests (a pytest-xdist worker, or
pytest itself with ``-n 0``) appends a line when a test starts and when it ends, with its PID, to the file
named by ``$SUITE_CLOCK``. The benchmark charges the CPU of every process a worker started to the test
running on that worker at the time. Loaded with ``-p benchmarks.suite_clock``; without ``$SUITE_CLOCK`` it
does nothing."""

from __future__ import annotations

import json
import os
import time

import pytest

CLOCK_ENV = "SUITE_CLOCK"


def _note(event: str, nodeid: str) -> None:
    path = os.environ.get(CLOCK_ENV)
    if path:
        with open(path, "a") as f:  # one short line per write: appends from several workers do not interleave
            f.write(json.dumps({"t": time.time(), "pid": os.getpid(), "event": event, "test": nodeid}) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Runs where the test runs (never in the xdist controller), around its setup, call and teardown."""
    _note("start", item.nodeid)
    yield
    _note("end", item.nodeid)
