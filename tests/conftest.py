"""Shared fixtures: real servers on 127.0.0.1, started here and stopped by PID."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from pristine_home import HEADER  # first: it points $AUTOMEM_HOME at the committed project data

from automem_dagster.defs.common.resources import StorageResource
from automem_dagster.llm import embedded_server
from automem_dagster.llm.embedded_server import embedded_model_path
from automem_dagster.llm.process import ServerProcess
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.standins.scripted_server import scripted_server
from automem_dagster.standins.scripted_vllm import scripted_vllm

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # plain `pytest` (unlike `python -m pytest`) leaves the checkout, so `benchmarks`, off sys.path
    sys.path.insert(0, str(ROOT))


def pytest_report_header(config):
    return HEADER


def pytest_configure(config):
    """Under pytest-xdist each worker gets its share of the cores for the embedded model server and
    for torch, passed on to the servers and subprocesses its tests start. Two workers whose servers
    each took every core made the whole suite slower than one process (CI: 2,033 s against
    1,936 s), since llama.cpp's threads stall when another process holds a core
    (``embedded_server.default_threads``). An explicit setting in the environment wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        share = str(max(1, (os.cpu_count() or 2) // workers))
        os.environ.setdefault("AUTOMEM_EMBEDDED_THREADS", share)
        os.environ.setdefault("AUTOMEM_TORCH_THREADS", share)


@pytest.fixture(scope="session")
def embedded(tmp_path_factory):
    """The real embedded model server (SmolLM2-135M via llama.cpp), shared by the integration tests."""
    server = embedded_server(tmp_path_factory.mktemp("embedded") / "server.log", parallel=2).start()
    yield server
    stop_and_prove_gone(server)


def stop_and_prove_gone(server) -> None:
    """Stop ``server`` by its PID and fail unless the process is gone."""
    pid = server.pid
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.fixture
def scripted(tmp_path):
    """Factory: ``scripted(rules, provider=None)`` starts a scripted OpenAI-compatible server (enforcing
    ``provider``'s rules when given, see ``standins/scripted_provider.py``); ``server.request_log`` holds every
    request it received, one JSON line each, ``server.rules`` the rules it answers from. All are stopped at
    teardown."""
    servers = []

    def start(rules: list[dict], provider: dict | None = None):
        n = len(servers)
        path = tmp_path / f"rules{n}.json"
        path.write_text(json.dumps({"rules": rules, **({"provider": provider} if provider else {})}))
        server = scripted_server(path, tmp_path / f"scripted{n}.log", request_log=tmp_path / f"requests{n}.jsonl").start()
        server.request_log, server.rules = tmp_path / f"requests{n}.jsonl", rules
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def vllm_server(tmp_path):
    """Factory: ``vllm_server(rules, **options)`` starts the scripted vLLM server (``standins/scripted_vllm.py``)
    answering from ``rules``; each is stopped at teardown and proven gone."""
    servers = []

    def start(rules: list[dict], **options):
        path = tmp_path / f"vllm-rules{len(servers)}.json"
        path.write_text(json.dumps(rules))
        server = scripted_vllm(path, tmp_path / f"vllm{len(servers)}.log", **options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        stop_and_prove_gone(server)


@pytest.fixture
def specialist_vllm(vllm_server):
    """Factory: ``specialist_vllm(rules)`` starts the scripted vLLM server serving, as its base, the
    folder the embedded trainer trains on (what a trained adapter records as its base), so a round's
    specialist is loaded at runtime and served as a vLLM user's would be, base check included."""
    base = str(embedded_model_path().parent)
    return lambda rules: vllm_server(rules, base_model="scripted", base_root=base, max_lora_rank=256)


@pytest.fixture(autouse=True)
def scratch_dagster_home(tmp_path, monkeypatch):
    """A CLI round is a run in ``$DAGSTER_HOME``'s instance (``defs/cli_rounds.py``): a scratch one per
    test, so no test writes into the checkout's ``.dagster_home``."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))


@pytest.fixture
def storage(tmp_path):
    """Dagster's storage resource on a scratch project: a copy of the shipped scaffolds, and empty
    runs, lineage and specialist folders, so no test touches the checkout's ``assets/``."""
    scaffolds = tmp_path / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    return StorageResource(runs=str(tmp_path / "runs"), scaffolds=str(scaffolds), lineage=str(tmp_path / "lineage"),
                           specialists=str(tmp_path / "specialists"))


SERVER_FIXTURES = frozenset({"embedded", "scripted", "vllm_server", "specialist_vllm"})
"""The fixtures above that start a server process: a test using one, itself or through another
fixture, is marked ``server`` at collection; a test that starts one otherwise carries the mark itself."""


def pytest_collection_modifyitems(items):
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """An unmarked test that starts a server process here (every server is a ``ServerProcess``), in its
    body or in a fixture it sets up at any scope, fails: ``-m "not server"`` stays the subset that starts none."""
    if item.get_closest_marker("server") is not None:
        yield
        return

    def refuse(server, wait_s: float = 120.0):
        pytest.fail(f"{item.nodeid} starts a server process ({server.label}) but is not marked `server`: "
                    "add @pytest.mark.server, or use a fixture of SERVER_FIXTURES (tests/conftest.py)")

    start, ServerProcess.start = ServerProcess.start, refuse
    try:
        yield
    finally:
        ServerProcess.start = start


CI_REQUIRED_ENV = "AUTOMEM_CI"
"""Set by ``.ci/run``: a test marked ``ci_required`` that skips (no Chromium, no playwright, no
dagster-k8s) then fails, so a check that never runs where changes land cannot pass unnoticed."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(CI_REQUIRED_ENV) and item.get_closest_marker("ci_required"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} is marked ci_required but skipped under {CI_REQUIRED_ENV}=1: {reason} "
                           "(.ci/run installs what it needs: see its comments)")
