"""docs/scale.md's two-machine recipe, run as written on two hosts made here: a structure round on Celery workers of
a main host and a worker host, on a Postgres instance, with the worker host lost mid-shard.

``deploy/two-hosts.sh`` makes the hosts (two network namespaces joined by a veth pair, root only) and starts, on the
main host's address 10.77.0.1, Postgres, redis-server and the scripted stand-in as the game model (the embedded
model's replies may part between runs where two tokens nearly tie, and this test compares batches exactly). The
worker host sees only the share (the project home and the step outputs, at the same paths); its own folder and the
main host's are apart. One worker process on each host; while the evaluation plays, every process of the worker
host is killed (SIGKILL, as a machine lost) when one of its pool processes has an evaluation episode 2 steps in.
Redis gives the lost shard to the main host's worker after the visibility timeout, and the shard resumes its
episodes where they stopped: the round's batches and decision equal the one-process round's, and no episode of a
batch was played from step 0 twice. A worker host without the share refuses to start, naming what it lacks.

Each host's nftables fence (``deploy/two-hosts.sh traffic``) lets through only the recipe's ports between the hosts'
addresses: the round needs nothing else (no packet dropped), stays within stated bounds (connections per service,
the round's time), and a probe to a port outside the recipe, either way, is dropped and counted.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from batch_content import batch_content
from builders import endpoints_file
from celery_round_records import IDLE_SLOWLY, decision, merged_batches, resumes
from sharded_rollouts import recorded_steps

from automem_dagster.defs.execution.shards import PLAYED_IN

pytestmark = [pytest.mark.e2e, pytest.mark.server, pytest.mark.ci_required]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "two-hosts.sh"
MAIN = "10.77.0.1"
VISIBILITY_S = 15
"""Longer than any shard of this round takes here, short enough that the lost shard comes back soon."""
ROUND_LIMIT_S = 240
SERVICES = ("postgres", "redis", "model")
CONNECTIONS_BOUND = {"postgres": 160, "redis": 24, "model": 16}
"""The most connections the worker host may open to each service of the main host in this test: about 3x the 55,
8 and 4 of a passing run (load 6-8), whose worker host ran some of the 6 shards and was lost in one; it may run
more of them."""
PROBE_S = 1.0
"""How long a probe waits for its connection: the fence drops it, so it times out."""
ROUND = ["rounds", "--game", "crafter", "--rollout-episodes", "2", "--rollout-max-steps", "4", "--eval-episodes", "2",
         "--eval-max-steps", "4", "--max-rounds", "1", "--patience", "1", "--meta", "rules", "--no-tracking"]
"""tests/celery_round_records.py's round with half its evaluation seeds: each evaluation shard plays one episode."""


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if any(shutil.which(tool) is None for tool in ("ip", "nft", "redis-server")):
        return "iproute2, nftables or redis-server is missing (Debian: apt-get install iproute2 nftables redis-server)"
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        return "Postgres is missing (Debian: apt-get install postgresql)"
    for module in ("dagster_celery", "dagster_postgres"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (the celery and postgres extras)"
    return None


@pytest.fixture
def hosts(tmp_path):
    """The two hosts of deploy/two-hosts.sh, the scripted model on the main host; taken down whatever happens."""
    if (reason := _missing()) is not None:
        pytest.skip(reason)
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(IDLE_SLOWLY))
    # Not under tmp_path: pytest removes older runs' folders, those of a session beside this one included.
    folder = Path(tempfile.mkdtemp(prefix="automem-two-hosts-"))
    name = f"am{os.getpid() % 100000}"
    env = {**os.environ, "AUTOMEM_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        up = subprocess.run(["bash", str(SCRIPT), "up", str(folder), "--name", name, "--model", "scripted", str(rules)],
                            env=env, capture_output=True, text=True, timeout=180)
        assert up.returncode == 0, up.stdout + up.stderr
        shared = dict(line.split("=", 1) for line in (folder / "hosts.env").read_text().splitlines())
        yield SimpleNamespace(folder=folder, name=name, env={**env, **shared}, project=Path(shared["AUTOMEM_HOME"]))
    finally:
        down = subprocess.run(["bash", str(SCRIPT), "down", str(folder)], env=env, capture_output=True, text=True,
                              timeout=120)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        shutil.rmtree(folder, ignore_errors=True)
        assert down.returncode == 0 and name not in listed, down.stdout + down.stderr + listed


def _on(hosts, host: str, *command: str, **env: str) -> list[str]:
    """``command`` run on ``host`` (``main``, ``worker``, or ``worker --no-share``) with the hosts' environment."""
    return ["bash", str(SCRIPT), *host.split()[:1], str(hosts.folder), *host.split()[1:], "env",
            *(f"{k}={v}" for k, v in env.items()), *command]


def _automem(*args: str) -> list[str]:
    return [sys.executable, "-m", "automem_dagster.cli", *args]


def _worker_pids(name: str) -> set[int]:
    listed = subprocess.run(["ip", "netns", "pids", f"{name}-worker"], capture_output=True, text=True).stdout
    return {int(pid) for pid in listed.split()}


def _playing(pid: int) -> list[Path]:
    """The partial trajectories process ``pid`` holds open (an episode it is playing)."""
    try:
        links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [Path(link) for link in links if link.endswith(".jsonl.partial")]


def _lose_the_worker_host_mid_episode(hosts, killed: list, stop: threading.Event) -> None:
    """SIGKILL every process of the worker host once one of them plays an evaluation episode 2 steps in."""
    while not stop.is_set() and not killed:
        pids = _worker_pids(hosts.name)
        for pid in pids:
            playing = [p for p in _playing(pid) if "evaluation" in str(p) and recorded_steps(p) >= 2]
            if playing:
                for each in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(each, signal.SIGKILL)
                killed.append((pid, str(playing[0])))
                break
        time.sleep(0.1)


def _started(command: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _ended(process: subprocess.Popen, log: Path, limit_s: float) -> str:
    """What ``process`` said once it ended (within ``limit_s``), and its exit status."""
    try:
        process.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return f"exit {process.returncode}: {log.read_text()[-4000:]}"


def _traffic(hosts) -> dict[tuple[str, str], tuple[int, int, int]]:
    """``deploy/two-hosts.sh traffic``'s counters: (host, service or drop) -> (connections, packets, bytes)."""
    said = subprocess.run(["bash", str(SCRIPT), "traffic", str(hosts.folder)], capture_output=True, text=True, timeout=30)
    assert said.returncode == 0, said.stdout + said.stderr
    rows = [line.split() for line in said.stdout.splitlines()[1:]]
    return {(host, what): (0 if conns == "-" else int(conns), int(packets), int(size))
            for host, what, conns, packets, size in rows}


def _probes(hosts) -> list[str]:
    """Connections the fence must drop: the worker host to a port of the main host not in the recipe, and the main
    host to the worker host (which serves nothing); what each one's ``connect`` said."""
    probe = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))"
    running = [subprocess.Popen(_on(hosts, host, sys.executable, "-c", probe, address, port, str(PROBE_S)),
                                env=hosts.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for host, address, port in (("worker", MAIN, "5433"), ("main", "10.77.0.2", "6379"))]
    return [process.communicate(timeout=30)[0] for process in running]


def test_a_round_across_two_hosts_on_postgres_equals_the_one_process_round_through_a_lost_worker_host(hosts):
    endpoints = endpoints_file(hosts.project / "endpoints-scripted.yaml",
                               SimpleNamespace(base_url=f"http://{MAIN}:8080/v1"), ("game",))
    alone = hosts.folder / "main" / "alone"
    shutil.copytree(hosts.project / "assets", alone / "assets")
    (alone / "dagster_home").mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", alone / "dagster_home" / "dagster.yaml")
    main_home = {"DAGSTER_HOME": str(hosts.folder / "main" / "dagster_home")}
    worker_home = {"DAGSTER_HOME": str(hosts.folder / "worker" / "dagster_home")}
    logs = {"main": hosts.folder / "main" / "automem-worker.log", "worker": hosts.folder / "worker" / "automem-worker.log",
            "alone": hosts.folder / "main" / "alone-round.log", "unshared": hosts.folder / "worker" / "unshared.log"}

    processes = {
        # A worker host that lacks the share.
        "unshared": _on(hosts, "worker --no-share", *_automem("worker"), **worker_home),
        **{host: _on(hosts, host, *_automem("worker", "--concurrency", "1", "--name", f"{host}@{hosts.name}",
                                            "--visibility-timeout", str(VISIBILITY_S), *(f"--queue={q}" for q in queues)),
                     **(main_home if host == "main" else worker_home))
           for host, queues in (("main", ("dagster", "game_endpoint")), ("worker", ("game_endpoint",)))}}
    killed: list = []
    stop = threading.Event()
    killer = threading.Thread(target=_lose_the_worker_host_mid_episode, args=(hosts, killed, stop))
    started: dict[str, subprocess.Popen] = {}
    try:
        # The one-process round, on the main host against the same model, in a project home and instance of its own.
        started["alone"] = _started(_on(hosts, "main", *_automem(*ROUND, "--endpoints", str(endpoints)),
                                        AUTOMEM_HOME=str(alone), DAGSTER_HOME=str(alone / "dagster_home")),
                                    hosts.env, logs["alone"])
        # The recipe, in its order: the instance once (its game_endpoint pool: deploy/dagster-postgres.yaml's 4
        # slots), then the workers, then the round.
        done = subprocess.run(_on(hosts, "main", *_automem("worker", "--migrate"), **main_home), env=hosts.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        started.update({name: _started(command, hosts.env, logs[name]) for name, command in processes.items()})
        for host in ("main", "worker"):
            deadline = time.monotonic() + 120
            while " ready." not in logs[host].read_text():
                assert time.monotonic() < deadline and started[host].poll() is None, logs[host].read_text()[-3000:]
                time.sleep(0.2)
        killer.start()
        began = time.monotonic()
        celery_round = subprocess.run(_on(hosts, "main", *_automem(
            *ROUND, "--endpoints", str(endpoints), "--executor", "celery", "--shards", "2",
            "--visibility-timeout", str(VISIBILITY_S)), **main_home), env=hosts.env, capture_output=True, text=True,
            timeout=ROUND_LIMIT_S)
        took = time.monotonic() - began
        during = _traffic(hosts)
        probes = _probes(hosts)
        after = _traffic(hosts)
        alone_said, unshared_said = (_ended(started[name], logs[name], ROUND_LIMIT_S) for name in ("alone", "unshared"))
    finally:
        stop.set()
        if killer.is_alive():
            killer.join()
        for process in started.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
    assert celery_round.returncode == 0, (celery_round.stdout[-3000:] + celery_round.stderr[-3000:]
                                          + logs["main"].read_text()[-3000:])
    assert alone_said.startswith("exit 0:"), alone_said
    assert unshared_said.startswith("exit 3:"), unshared_said
    for what in ("project home: ", "step outputs: ", str(hosts.project / "runs"), "Mount the share at the same paths"):
        assert what in unshared_said, unshared_said
    assert killed, "no evaluation episode was seen on the worker host 2 steps in"
    print("traffic between the hosts (connections, packets, bytes):",
          {f"{host} {what}": counts for (host, what), counts in during.items() if host == "worker"})
    assert took < ROUND_LIMIT_S
    for host in ("main", "worker"):
        # Nothing the recipe sent was dropped, and nothing else was sent; each probe was dropped and counted.
        assert during[host, "refused"][1] == during[host, "dropped"][1] == 0, during
        assert after[host, "dropped"][1] > 0 and after[host, "refused"] == during[host, "refused"], after
    assert all("timed out" in said for said in probes), probes
    for service in SERVICES:
        assert 0 < during["worker", service][0] <= CONNECTIONS_BOUND[service], (service, during)

    there, here = merged_batches(hosts.project / "runs"), merged_batches(alone / "runs")
    assert there.keys() == here.keys() and len(there) == 4, there.keys()
    played_in = {name: json.loads((batch / PLAYED_IN).read_text())["shards"] for name, batch in there.items()}
    pids = {s["pid"] for shards in played_in.values() for s in shards}
    print(f"two-host round in {took:.0f} s; worker host lost while its process {killed[0][0]} played "
          f"{killed[0][1]}; shards played in processes {sorted(pids)}")
    assert killed[0][0] not in {s["pid"] for name, shards in played_in.items() if "evaluation" in name for s in shards}
    for name, batch in there.items():
        assert batch_content(batch) == batch_content(here[name]), name
    assert decision(hosts.project / "runs") == decision(alone / "runs")
    resumed = resumes(there)
    assert resumed and all(r["at_step"] > 0 for r in resumed), resumed  # resumed mid-episode, none from step 0
