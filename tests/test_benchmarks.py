"""The benchmarks work: each ``--quick`` run finishes and emits its JSON with a verdict per target.

These check the benchmarks, not the speed of anything: no figure is compared with a threshold.
"""

import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # plain `pytest` (unlike `python -m pytest`) leaves the checkout off sys.path
    sys.path.insert(0, str(ROOT))

MACHINE_KEYS = {"platform", "cpu_count", "python"}


def _bench(name):
    return importlib.import_module(f"benchmarks.{name}")


def _run(name, tmp_path, capsys, *args):
    """Run a benchmark's main in quick mode; return its JSON, checked to be the same on stdout and in --out."""
    out = tmp_path / f"{name}.json"
    assert _bench(name).main(["--quick", "--out", str(out), *args]) == 0
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    assert {"benchmark", "quick", "machine", "settings", "results", "targets", "verdict", "duration_s"} <= result.keys()
    assert result["benchmark"] == name and result["quick"] is True
    assert MACHINE_KEYS <= result["machine"].keys()
    for t in result["targets"]:
        assert {"name", "value", "limit", "comparison", "verdict", "source"} <= t.keys()
        assert t["verdict"] in ("PASS", "MISS")
    assert result["verdict"] in ("PASS", "MISS", "no targets")
    return result


def test_memory_store_quick(tmp_path, capsys):
    result = _run("memory_store", tmp_path, capsys)
    configs = result["results"]["configurations"]
    assert set(configs) == {"free", "keyed", "pruned"}
    for name, c in configs.items():
        write = "UPSERT" if name == "keyed" else "APPEND"
        assert set(c["latency_by_op"]) == {write, "READ", "TAIL", "SEARCH", "COUNT"}
        assert set(c["final"]) == {"map.txt", "events.txt", "notes.txt"}
        assert {"end_over_start", "end_over_middle", "window_mean_ms"} <= c["latency_growth"].keys()
        assert c["size_over_run"][-1]["ops"] == result["settings"]["ops"]
    assert {"free_over_keyed_final_bytes", "free_over_keyed_end_window_mean"} <= result["results"]["ratios"].keys()
    assert len(result["targets"]) == 4


def test_env_speed_quick(tmp_path, capsys):
    result = _run("env_speed", tmp_path, capsys)
    assert set(result["results"]) == {"crafter", "minihack:Corridor-R3", "nethack"}
    for r in result["results"].values():
        for variant in ("adapter", "adapter_no_text", "raw_env"):
            assert r[variant]["steps"] > 0 and r[variant]["steps_per_s"] > 0
        # Removing the text must not change what happens in the game.
        assert r["same_episodes_with_and_without_text"] is True
        assert {"text_ms_per_step", "raw_over_adapter_steps_per_s", "no_text_over_adapter_steps_per_s"} <= r.keys()
    assert result["targets"] == [] and result["verdict"] == "no targets"


def test_harness_overhead_quick(tmp_path, capsys):
    result = _run("harness_overhead", tmp_path, capsys)
    settings = result["settings"]
    assert set(result["results"]) == set(settings["games"]) == {"crafter", "minihack:Corridor-R3", "nethack"}
    for game, f in result["results"].items():
        assert f["steps"] == settings["episodes"][game] * settings["max_steps"][game]
        assert {"harness", "game", "model", "wall", "share_outside_model", "agent_steps_per_s"} <= f.keys()
    assert [t["game"] for t in result["targets"]] == settings["games"]
    if any(t["verdict"] == "MISS" for t in result["targets"]):
        assert len(result["profile"]["top_cumulative"]) == 10


def test_harness_overhead_profile_and_endpoints_file(tmp_path, capsys, scripted):
    game = "minihack:Corridor-R3"
    profiled = _run("harness_overhead", tmp_path, capsys, "--games", game, "--profile")
    assert profiled["profile"]["game"] == game and len(profiled["profile"]["top_cumulative"]) == 10

    # --endpoints: the variant meant for real models, here pointed at a scripted server.
    server = scripted(_bench("harness_overhead").scripted_rules("search"))
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(f"game: {{name: game, base_url: '{server.base_url}', constrained: none}}\n")
    result = _run("harness_overhead", tmp_path, capsys, "--games", game, "--endpoints", str(endpoints))
    assert result["settings"]["endpoint"] == str(endpoints)
    [t] = result["targets"]
    assert t["comparison"] == "<" and t["limit"] == 0.02 and t["unit"] == "share"
