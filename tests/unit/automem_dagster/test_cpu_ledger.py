"""The CPU ledger (``automem_dagster.cpu_ledger``) and the breakdown both harness benchmarks report from it.

A real short run against the scripted stand-in checks that the figures add up (phases plus REST are the
process's CPU, harness is the process less the game) and, since those sums hold by construction, also
what could be wrong: a phase charged nothing or less than nothing, the game's CPU over its own wall
time, steps counted apart from the trajectory, the wall-based harness not the one the records give.
"""

import threading
import time

import pytest

from automem_dagster.cpu_ledger import LEDGER, REST, CpuLedger, Spent, spent
from benchmarks import rollout_scaling
from benchmarks.common import BOUNDED, MISS, PASS


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_nested_phase_is_charged_to_the_inner_one_only():
    ledger = CpuLedger()
    with ledger.phase("request"):
        _burn(0.01)
        with ledger.phase("memory"):
            _burn(0.02)
        _burn(0.01)
    seconds = ledger.snapshot()
    assert 0.02 <= seconds["request"] < 0.03 and 0.02 <= seconds["memory"] < 0.03
    assert sum(seconds.values()) == pytest.approx(seconds["request"] + seconds["memory"])


def test_every_threads_charges_count_and_a_finished_threads_book_is_folded():
    """Each thread writes its own book; the snapshot sums them, and keeps what a thread charged after it ended."""
    ledger = CpuLedger()

    def work():
        with ledger.phase("game"):
            _burn(0.01)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with ledger.phase("memory"):
        _burn(0.01)
    first = ledger.snapshot()
    assert 0.03 <= first["game"] < 0.045 and 0.01 <= first["memory"] < 0.02
    assert len(ledger._books) == 1     # the three finished threads' books are folded, this thread's is live
    assert ledger.snapshot() == first


def test_spent_holds_only_the_window_and_windows_add_up():
    with LEDGER.phase("digest"):
        _burn(0.01)   # before the window: not in it
    with spent() as window:
        with LEDGER.phase("digest"):
            _burn(0.02)
        _burn(0.01)   # in no phase: REST
    assert 0.02 <= window.phases["digest"] < 0.03 and window.process_s >= 0.03 and window.wall_s >= 0.03
    ms = window.per_step_ms(10)
    assert ms[REST] == pytest.approx((window.process_s - window.phases["digest"]) * 100) and ms[REST] >= 0.9
    both = window + window
    assert both.process_s == 2 * window.process_s and both.phases["digest"] == 2 * window.phases["digest"]
    assert Spent().per_step_ms(0) == {}


def _run(steps_per_s: float, process_ms: float, server_ms: float) -> dict:
    return {"steps_per_s": steps_per_s, "process_cpu_s_per_step": process_ms / 1e3, "server_cpu_s_per_step": server_ms / 1e3}


def test_the_cpu_bound_and_the_shard_verdict():
    one = {**_run(100.0, 5.0, 1.0), "efficiency": 0.8}
    alone = {**_run(60.0, 4.0, 1.0), "episodes": 32}   # one shard's 32 episodes alone in one process
    assert rollout_scaling.cpu_bound(one, 2) == pytest.approx(
        {"cores": 2, "cpu_s_per_step": 0.006, "steps_per_s": 2 / 0.006, "share_of_bound": 100 * 0.006 / 2})

    def verdict(sharded: dict) -> dict:
        sharded["cpu_bound"] = rollout_scaling.cpu_bound(sharded, 2)
        return rollout_scaling.shard_target(sharded, one, 64, alone)

    # 2 cores at 8 ms a step give 250 steps/s, 2.5x one process: 1.25x is a miss of the code.
    missed = verdict(_run(125.0, 7.0, 1.0))
    assert missed["verdict"] == MISS and missed["speedup_cpu_bound_allows"] == pytest.approx(2.5)
    # No episode steps faster than one alone: at efficiency 0.8 the shards can give at most 1.25x, reported only.
    assert missed["speedup_latency_allows"] == pytest.approx(1.25)
    # Two shards each as fast as 32 episodes alone (60 steps/s) give 1.2x, reported beside the verdict.
    assert missed["speedup_shares_alone_allow"] == pytest.approx(1.2)
    assert "32 episodes alone in one process step 60 times a second, so 2 such shards give 1.2x" in missed["note"]
    # At 16 ms a step the cores give 125 steps/s, 1.25x: the target is out of this machine's reach.
    bounded = verdict(_run(120.0, 15.0, 1.0))
    assert bounded["verdict"] == BOUNDED and bounded["speedup_cpu_bound_allows"] == pytest.approx(1.25)
    assert "125 steps/s" in bounded["note"] and "96% of that bound" in bounded["note"]
    assert verdict(_run(170.0, 15.0, 1.0))["verdict"] == PASS   # measured over the limit: a pass, whatever the bound
