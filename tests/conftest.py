"""Shared fixtures: real servers on 127.0.0.1, started here and stopped by PID."""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from pristine_home import HEADER  # first: it points $AUTOMEM_HOME at the committed project data

from automem_dagster.defs.resources import StorageResource
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
    config.pluginmanager.register(CostOrder(), "automem-cost-order")
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


@pytest.fixture(scope="session")
def scripted_pool(tmp_path_factory):
    """The scripted servers of this worker, idle between tests: ``scripted`` reloads one with a test's
    rules (``POST /scripted/reload``) instead of starting a process per test. Stopped at session end."""
    idle: list[ServerProcess] = []
    folder = tmp_path_factory.mktemp("scripted")
    yield idle, folder
    for server in idle:
        stop_and_prove_gone(server)


def _reload(server, rules: list[dict], provider: dict | None, request_log: Path, embeddings: bool = False) -> None:
    body = json.dumps({"rules": rules, "provider": provider, "log": str(request_log), "embeddings": embeddings}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/scripted/reload", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        resp.read()


@pytest.fixture
def scripted(tmp_path, scripted_pool):
    """Factory: ``scripted(rules, provider=None, embeddings=False)`` gives a scripted OpenAI-compatible server
    answering from ``rules`` (enforcing ``provider``'s rules when given, see ``standins/scripted_provider.py``;
    serving ``/v1/embeddings`` as a llama.cpp started with ``--embeddings`` does, with ``embeddings``), with fresh
    counters; ``server.request_log`` holds every request it received in this test, one JSON line each,
    ``server.rules`` the rules it answers from. Each call gives another server; they are this worker's
    pooled ones, reloaded (a new process only when none is idle), and go back to the pool at teardown
    unless the test stopped them."""
    idle, folder = scripted_pool
    servers = []

    def start(rules: list[dict], provider: dict | None = None, embeddings: bool = False):
        n = len(servers)
        request_log = tmp_path / f"requests{n}.jsonl"
        server = idle.pop() if idle else None
        if server is None:
            path = folder / f"rules-{os.getpid()}-{time.monotonic_ns()}.json"
            path.write_text(json.dumps({"rules": []}))
            server = scripted_server(path, path.with_suffix(".log")).start()
        _reload(server, rules, provider, request_log, embeddings)
        server.request_log, server.rules = request_log, rules
        servers.append(server)
        return server

    yield start
    for server in servers:
        alive = server.process is not None and server.process.poll() is None
        if alive:
            idle.append(server)
        else:
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


SERVER_FIXTURES = frozenset({"embedded", "scripted", "scripted_pool", "vllm_server", "specialist_vllm"})
"""The fixtures above that start a server process: a test using one, itself or through another
fixture, is marked ``server`` at collection; a test that starts one otherwise carries the mark itself."""


TIERS = ("unit", "contract", "e2e")
"""The suite's three tiers (setup.cfg markers; ``make unit``, ``make contract``, ``make e2e``; ``make test``
runs all three). ``unit``: no process, no socket (``pytest_runtest_call`` refuses both). ``contract``:
the stand-ins of ``automem_dagster/standins/`` and in-process Dagster. ``e2e``: the real embedded model,
DVC, LoRA training, the browser."""
E2E_FIXTURES = frozenset({"embedded"})
"""Fixtures that start a real component: a test using one, itself or through another fixture, is ``e2e``."""


def tier(item) -> str:
    """``item``'s tier: its own ``unit``/``contract``/``e2e`` mark if it has one; else ``e2e`` for a test marked
    ``integration``, marked ``server`` by hand (it starts a real server itself, not through a stand-in fixture)
    or using an ``E2E_FIXTURES`` fixture; ``contract`` for one using a ``SERVER_FIXTURES`` stand-in;
    ``unit`` otherwise. So a test another file adds is classified by the fixtures it uses."""
    own = next((name for name in TIERS if item.get_closest_marker(name) is not None), None)
    if own is not None:
        return own
    names = set(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("integration") or item.get_closest_marker("server") or E2E_FIXTURES & names:
        return "e2e"
    return "contract" if SERVER_FIXTURES & names else "unit"


SLOWEST_FIRST = (
    # e2e
    "test_learning_known_answer.py", "test_dvc.py", "test_memory_agent_embedded.py", "test_endpoints_embedded.py",
    "test_ui_pages.py", "test_benchmarks_quick.py", "test_celery_executor.py", "test_celery_rounds.py",
    "test_two_hosts.py", "test_sft_training.py", "test_replay_concurrency.py", "test_server_per_run.py",
    "test_dagster_proficiency_training.py", "test_rollout.py", "test_sharded_dagster.py", "test_dagster_dev.py",
    "test_played_shard.py", "test_base_cache.py",
    # contract
    "test_structure_round.py", "test_dvc_stages.py", "test_demo_home.py", "test_resume.py", "test_rounds.py",
    "test_known_answer_variants.py", "test_game_replay.py", "test_dvc_round.py", "test_settings_default_everywhere.py",
    "test_meta_tools.py",
    # unit
    "test_device_plan.py", "test_sft.py", "test_tracker.py")
"""The test files that take longest, longest first, per tier (a file's name is the suite's only one): they are
handed to the pytest-xdist workers first (``make`` runs ``--dist loadfile --no-loadscope-reorder``), so the
slowest file never starts last while the other worker has nothing left; the other files follow, those with
most tests first (xdist's own order). Measured on the idle 2-core machine on 2026-12-07 with
``benchmarks/suite_cost.py`` (``make test``'s tiers, each file's summed test time and the CPU of every process
its tests ran, in seconds): e2e 387/364 (the learning check: two LoRA trainings and three played arms), 191/181,
186/183, 126/124, 116/125, 110/100, 108/72, 98/48, 87/53, 59/57, 57/54, 53/51, 52/50, 52/47, 44/34, 33/11, 27/25
and 20/19; contract 77/44, 32/22, 30/18, 27/19, 27/16, 26/17, 22/16, 21/14, 20/15 and 20/13; unit 24/24, 9/8 and
6/3. The tiers took 67, 219 and 974 s of wall time for 125, 413 and 1,753 s of the machine's busy CPU time: the
suite is CPU-bound, so the order only keeps a worker from idling at a tier's end."""


def by_cost(items: list) -> list:
    """``items`` with ``SLOWEST_FIRST``'s files first, in its order, then the other files by their number
    of tests, most first; a file's tests keep their order and stay together."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)

    def cost(path: str) -> tuple[int, int]:
        name = path.rsplit("/", 1)[-1]
        return (SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST), -len(files[path]))

    return [item for path in sorted(files, key=cost) for item in files[path]]


TESTS = Path(__file__).resolve().parent


def folder_tier(path) -> str | None:
    """The tier a test file's folder names: ``tests/unit/<package>/``, ``tests/contract/``, ``tests/e2e/``;
    None for a file directly in ``tests/``, whose tests may be of several tiers."""
    parts = Path(path).resolve().relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_runtest_setup(item):
    """A test in a tier's folder that is of another tier fails, naming both: the folders say what runs
    where, and a test that starts a server has no place under ``tests/unit/``."""
    folder, found = folder_tier(item.path), tier(item)
    if folder is not None and folder != found:
        pytest.fail(f"{item.nodeid} is under tests/{folder}/ but is a {found} test (TIERS in tests/conftest.py): "
                    f"move it to tests/{found}/ (unit: tests/unit/<package>/) or to a file directly in tests/")


class CostOrder:
    """``by_cost`` after ``-m`` has deselected the other tiers, so the counts are the selected tests'."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        items[:] = by_cost(items)


def pytest_collection_modifyitems(items):
    for item in items:
        found = tier(item)  # before the fixture-derived `server` mark, which says nothing of the tier
        if found not in {m.name for m in item.iter_markers()}:
            item.add_marker(found)
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


UNIT_TIER_COMMANDS = ("minihack/scripts/mh_patch_nhdat.sh",)
"""Commands a unit test may run all the same: MiniHack writes every level by running this patch script
on NetHack's data file when an environment is made, so making a MiniHack game is a subprocess."""


@contextlib.contextmanager
def unit_tier_guard(item):
    """A ``unit`` test that starts a subprocess or opens an internet socket, in its body or a fixture,
    fails, naming the tier to mark it with: ``make unit`` stays the tier that needs nothing running."""
    if item.get_closest_marker("unit") is None:
        yield
        return

    def refuse(what: str):
        pytest.fail(f"{item.nodeid} is in the unit tier but {what}: mark it @pytest.mark.contract (stand-ins, "
                    "subprocesses) or @pytest.mark.e2e (a real model, DVC, training), see TIERS in tests/conftest.py")

    def no_process(self, *args, **kwargs):
        command = args[0] if args else kwargs.get("args")
        if any(allowed in str(command) for allowed in UNIT_TIER_COMMANDS):
            return original_popen(self, *args, **kwargs)
        refuse(f"starts a subprocess ({command!r})")

    def no_socket(self, address, *args):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            refuse(f"opens a socket to {address!r}")
        return original_connect(self, address, *args)

    original_popen, original_connect = subprocess.Popen.__init__, socket.socket.connect
    subprocess.Popen.__init__, socket.socket.connect = no_process, no_socket
    try:
        yield
    finally:
        subprocess.Popen.__init__, socket.socket.connect = original_popen, original_connect


@contextlib.contextmanager
def server_guard(item):
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with server_guard(item), unit_tier_guard(item):
        yield


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
