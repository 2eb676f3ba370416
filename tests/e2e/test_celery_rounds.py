"""A whole structure round (``automem rounds --executor celery``) on real Celery workers, against the same
round in process.

The scripted stand-in is the game model (it idles, one step of each episode slowly), the rules meta
diagnoses and revises; the round's batches are played in 2 seed shards each. Three ``automem worker``
processes serve a Redis on 127.0.0.1 (``tests/celery_cluster.py``) with a short visibility
timeout, and the game endpoint pool allows 3 shards at once. While the evaluation is played, one whole
worker (its main process and its pool process) is killed with SIGKILL in the middle of a shard's
episodes: Redis hands the shard to another worker once the visibility timeout passes, and the shard
resumes its episodes where they stopped. The round's batches and decision are the in-process round's;
the evaluation's shards ran in at least two worker pool processes, none of them this process.
"""

import json
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
from batch_content import batch_content
from builders import endpoints_file
from celery_cluster import started_cluster
from celery_round_records import IDLE_SLOWLY, ROUND, decision, merged_batches, resumes
from sharded_rollouts import recorded_steps

from automem_dagster import cli
from automem_dagster.commands import shared
from automem_dagster.defs.execution.shards import GAME_ENDPOINT_POOL, PLAYED_IN
from automem_dagster.loop.storage import Storage
from automem_dagster.paths import PROJECT_ROOT, SCAFFOLDS
from automem_dagster.rollout.shards import shard_dir

pytestmark = [pytest.mark.e2e, pytest.mark.server, pytest.mark.ci_required]

VISIBILITY_S = 25
"""Longer than any step of this round takes here, short enough that the lost shard comes back soon."""
SHARD_LINE = re.compile(r"shard (\d+): seeds \[[\d, ]*\] of (\S+)$")


def _storage(root: Path) -> Storage:
    shutil.copytree(SCAFFOLDS, root / "scaffolds")
    return Storage(runs=root / "runs", scaffolds=root / "scaffolds", lineage=root / "lineage",
                   specialists=root / "specialists")


def _round(monkeypatch, storage: Storage, *options: str) -> None:
    monkeypatch.setattr(shared, "STORAGE", storage)
    assert cli.main([*ROUND, *options]) == 0


def _running_shards(instance: dg.DagsterInstance) -> dict[str, tuple[int, Path | None]]:
    """The shard steps of the latest run now running: their process and the shard folder they play."""
    [run] = instance.get_runs(limit=1)
    running: dict[str, tuple[int, Path | None]] = {}
    for entry in instance.all_logs(run.run_id):
        key, event = entry.step_key or "", entry.dagster_event
        if "_shard[" not in key:
            continue
        if event is not None and event.event_type == dg.DagsterEventType.STEP_START:
            running[key] = (event.pid, None)
        elif event is not None and event.is_step_success or event is not None and event.is_step_failure:
            running.pop(key, None)
        elif event is None and key in running and (found := SHARD_LINE.search(entry.user_message)):
            running[key] = (running[key][0], shard_dir(Path(found[2]), int(found[1])))
    return running


def _kill_a_worker_mid_episode(home: Path, workers: list, killed: list) -> None:
    """SIGKILL the whole worker (its process group: main and pool process) whose pool process plays an
    evaluation shard with an episode 2 steps in, as a machine lost mid-shard would end it."""
    mains = {w.pid for w in workers}
    deadline = time.monotonic() + 300
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while time.monotonic() < deadline and not killed:
            for key, (pid, shard) in _running_shards(instance).items():
                partials = shard.glob("trajectories/*.jsonl.partial") if shard else []
                if "evaluation" in key and any(recorded_steps(p) >= 2 for p in partials):
                    main = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                    assert main in mains, (pid, main, mains)
                    os.killpg(main, signal.SIGKILL)
                    killed.append((main, pid, key))
                    break
            time.sleep(0.1)


def test_a_celery_round_equals_the_in_process_round_through_a_lost_worker(tmp_path, scripted, monkeypatch):
    server = scripted(IDLE_SLOWLY)
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", server, ("game",))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")  # as the CLI's instance has it
    here, there = _storage(tmp_path / "in_process"), _storage(tmp_path / "celery")
    _round(monkeypatch, here, "--endpoints", str(endpoints))

    with started_cluster(tmp_path, home, workers=3, visibility_s=VISIBILITY_S) as cluster:
        with dg.DagsterInstance.from_config(str(home)) as instance:  # `dagster instance concurrency set`
            instance.event_log_storage.set_concurrency_slots(GAME_ENDPOINT_POOL, 3)
        killed: list = []
        killer = threading.Thread(target=_kill_a_worker_mid_episode, args=(home, cluster.workers, killed))
        killer.start()
        began = time.monotonic()
        _round(monkeypatch, there, "--endpoints", str(endpoints), "--executor", "celery", "--shards", "2",
               "--broker", cluster.broker, "--visibility-timeout", str(VISIBILITY_S))
        killer.join()
        took = time.monotonic() - began
        mains = {w.pid for w in cluster.workers}

    assert killed, "no evaluation shard was seen mid-episode"
    batches = merged_batches(there.runs)
    # The training rollouts, the candidate's evaluation, the champion's and the champion's replay beside the
    # candidate (no A/A is stored for this identity, so the round plays the champion again: docs/gates.md).
    assert batches.keys() == merged_batches(here.runs).keys() and len(batches) == 4, batches.keys()
    played_in = {name: json.loads((batch / PLAYED_IN).read_text())["shards"] for name, batch in batches.items()}
    evaluation_pids = {s["pid"] for name, shards in played_in.items() if "evaluation" in name for s in shards}
    print(f"celery round in {took:.0f} s; killed worker {killed[0][0]} (pool process {killed[0][1]}, "
          f"{killed[0][2]}); evaluation shards played in worker processes {sorted(evaluation_pids)}; "
          f"this process {os.getpid()}, worker main processes {sorted(mains)}")
    assert len(evaluation_pids) >= 2 and os.getpid() not in evaluation_pids and not evaluation_pids & mains
    assert killed[0][1] not in evaluation_pids  # the killed shard was finished by another worker
    for name, batch in batches.items():
        assert batch_content(batch) == batch_content(merged_batches(here.runs)[name]), name
    assert decision(there.runs) == decision(here.runs)
    resumed = resumes(batches)
    assert resumed and all(r["at_step"] > 0 for r in resumed), resumed  # resumed mid-episode, none from step 0
