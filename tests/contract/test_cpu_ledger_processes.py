"""The CPU ledger (``automem_dagster.cpu_ledger``) on a real short run against the scripted stand-in:
the figures the harness benchmarks report add up (the ledger's own arithmetic:
tests/unit/automem_dagster/test_cpu_ledger.py)."""

import math

import pytest

from automem_dagster.cpu_ledger import PHASES, REST
from benchmarks import harness_overhead
from benchmarks.common import batch_episodes, load_scaffold_ref

GAME = "minihack:Corridor-R3"


def test_harness_overhead_breakdown_on_a_real_run(tmp_path, scripted):
    """harness_overhead's per-game figures on 2 episodes x 6 steps against the instant scripted endpoint."""
    episodes, max_steps = 2, 6
    server = scripted(harness_overhead.scripted_rules(harness_overhead.plan_action(GAME)))
    f = harness_overhead.measure(GAME, load_scaffold_ref(GAME, "v0"), episodes, max_steps, 1,
                                 harness_overhead.instant_endpoints(server.base_url), tmp_path)
    records = [s for episode in batch_episodes(tmp_path / GAME.replace(":", "-")) for s in episode]
    assert f["steps"] == len(records) == episodes * max_steps

    cpu, n = f["cpu_ms_per_step"], f["steps"]
    assert cpu["process"] == pytest.approx(f["process_cpu_s"] * 1e3 / n)
    assert sum(cpu[p] for p in PHASES) + cpu[REST] == pytest.approx(cpu["process"])
    assert cpu["harness"] == pytest.approx(cpu["process"] - cpu["game"])
    assert all(cpu[p] >= 0 for p in PHASES) and cpu[REST] >= 0, cpu
    for phase in ("request", "parse", "memory", "trajectory", "digest", "game", "setup"):
        assert cpu[phase] > 0, f"{phase} was charged nothing: {cpu}"
    # The game's phase is the CPU of its step on its lane's thread, inside the step record's game_s wall time.
    assert cpu["game"] <= f["game"]["mean_ms"], (cpu["game"], f["game"])

    rel = f["ledger_vs_wall"]
    wall_harness = [s["wall_s"] - s["game_s"] - sum(t["latency_s"] for t in s["turns"]) for s in records]
    assert rel["wall_harness_ms"] == pytest.approx(sum(wall_harness) * 1e3 / n, rel=1e-3)   # summary_ms rounds
    assert rel["ledger_harness_cpu_ms"] == pytest.approx(
        rel["wall_harness_ms"] + rel["outside_records_ms"] + rel["in_latency_less_off_cpu_ms"])
    assert rel["ledger_phases_cpu_ms"] + rel["client_and_event_loop_cpu_ms"] == pytest.approx(cpu["harness"])
    assert rel["outside_records_ms"] > 0 and f["connect_and_close_ms_per_step"] >= 0
    assert math.isfinite(rel["in_latency_less_off_cpu_ms"]) and "ledger harness CPU" in rel["relation"]
