"""The benchmarks' quick runs against scripted endpoints (and the game-speed one, which starts game
processes): each finishes and emits its JSON with a verdict per target. These check the benchmarks, not
the speed of anything: no figure is compared with a threshold."""

from pathlib import Path

import builders
import pytest
from benchmark_runs import benchmark_module, run_quick

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.contract
def test_env_speed_quick(tmp_path, capsys):
    result = run_quick("env_speed", tmp_path, capsys)
    assert set(result["results"]) == {"crafter", "minihack:Corridor-R3", "nethack"}
    for r in result["results"].values():
        for variant in ("adapter", "adapter_no_text", "raw_env"):
            assert r[variant]["steps"] > 0 and r[variant]["steps_per_s"] > 0
        # Removing the text must not change what happens in the game.
        assert r["same_episodes_with_and_without_text"] is True
        assert {"text_ms_per_step", "raw_over_adapter_steps_per_s", "no_text_over_adapter_steps_per_s"} <= r.keys()
    assert result["targets"] == [] and result["verdict"] == "no targets"


def test_harness_overhead_profile_and_endpoints_file(tmp_path, capsys, scripted):
    game = "minihack:Corridor-R3"
    profiled = run_quick("harness_overhead", tmp_path, capsys, "--games", game, "--profile")
    assert profiled["profile"]["game"] == game and len(profiled["profile"]["top_cumulative"]) == 10

    # --endpoints: the variant meant for real models, here pointed at a scripted server.
    server = scripted(benchmark_module("harness_overhead").scripted_rules("search"))
    endpoints = builders.endpoints_file(tmp_path / "endpoints.yaml", server, ("game",))
    result = run_quick("harness_overhead", tmp_path, capsys, "--games", game, "--endpoints", str(endpoints))
    assert result["settings"]["endpoint"] == str(endpoints)
    [t] = result["targets"]
    assert t["comparison"] == "<" and t["limit"] == 0.02 and t["unit"] == "share"


def _scripted_endpoints(tmp_path, scripted):
    server = scripted([{"match": "Phase: LOG", "reply": "<|DONE|>"},
                       {"match": "", "reply": "<|ACTION|>noop<|END|>"}],  # PLAN turns and the baselines
                      embeddings=True)
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(f"game: {{name: game, base_url: '{server.base_url}', constrained: none}}\n"
                         f"embed: {{name: embed, base_url: '{server.base_url}'}}\n")  # the rag baseline's embeddings
    return str(endpoints)


def test_step_cost_quick_on_a_scripted_endpoint(tmp_path, capsys, scripted):
    result = run_quick("step_cost", tmp_path, capsys, "--endpoints", _scripted_endpoints(tmp_path, scripted))
    f, s = result["results"], result["settings"]
    assert f["steps"] == s["episodes"] * s["max_steps"] and f["valid_action_rate"] == 1.0
    assert f["calls_per_step_by_phase"]["plan"] == 1.0 and f["input_tokens_per_step"]["mean"] > 0
    assert len(f["mean_by_step_index"]["input_tokens"]) == s["max_steps"]
    assert Path(f["plot"]) == tmp_path / "crafter_tokens_per_step_quick.png" and Path(f["plot"]).is_file()
    assert len(result["targets"]) == 9 and result["growth_rule"]
    # The scripted server reports no cache, so every input token counts as processed anew.
    assert f["uncached_input_tokens_per_step"]["mean"] == f["input_tokens_per_step"]["mean"]
    assert f["calls_with_cache_report"] == 0.0 and f["malformed_turns_per_step"] == 0.0
    assert set(result["beside"]) == {"minihack:Corridor-R3", "nethack"}
    assert all(b["steps"] == f["steps"] for b in result["beside"].values())


def test_concurrency_quick_on_a_scripted_endpoint(tmp_path, capsys, scripted):
    result = run_quick("concurrency", tmp_path, capsys, "--endpoints", _scripted_endpoints(tmp_path, scripted))
    by_slots = result["results"]["by_slots"]
    assert set(by_slots) == {str(n) for n in result["settings"]["slots"]} and "1" in by_slots
    assert by_slots["1"]["speedup_over_sequential"]["episodes_per_min"] == 1.0
    for f in by_slots.values():
        assert f["episodes"] == result["settings"]["episodes"] and f["episodes_per_min"] > 0
    assert [t["source"] for t in result["targets"]] == ["issue"] * (len(by_slots) - 1)


def test_context_cost_quick_on_a_scripted_endpoint(tmp_path, capsys, scripted):
    extra = tmp_path / "candidate.yaml"
    extra.write_text((ROOT / "assets/scaffolds/crafter/v0.yaml").read_text().replace("log_max_ops: 5", "log_max_ops: 3"))
    result = run_quick("context_cost", tmp_path, capsys, "--endpoints", _scripted_endpoints(tmp_path, scripted),
                  "--scaffold", "v0", "--scaffold", str(extra))
    agents = result["results"]["agents"]
    # v0 given again is the same content as assets' v0 and is not played twice.
    assert list(agents) == ["memory v0", f"memory v0 ({extra})", "window (8)", "cot (8)", "rag (8)", "summary (8)",
                            "random"]
    assert agents["random"]["input_tokens_per_step"] == 0 and agents["random"]["total_tokens_per_episode"] == 0
    assert agents["random"]["input_growth_per_step"] is None
    assert agents["window (8)"]["model_calls_per_step"] == 1.0
    # rag embeds every step's observation; summary rewrites its summary at step 2 of 3 (quick: every 2 steps)
    assert agents["rag (8)"]["model_calls_per_step"] == 2.0 and agents["summary (8)"]["model_calls_per_step"] == 4 / 3
    assert set(agents["rag (8)"]["input_tokens_per_step_by_phase"]) == {"embed", "action"}
    assert "summary" in agents["summary (8)"]["input_tokens_per_step_by_phase"]
    for label, f in agents.items():
        assert f["steps"] == result["settings"]["max_steps"]
        if label != "random":
            assert f["input_tokens_per_step"] > 0 and f["input_growth_per_step"]["steps"] == f["steps"]
    assert len(result["targets"]) == 2 * 6 and result["growth_rule"]


@pytest.mark.contract
def test_suite_cost_quick_charges_the_tests_cpu_to_their_files(tmp_path, capsys):
    """The suite-layout unit tests run by pytest in one process: every test is clocked, and its CPU is charged
    to its file; the busy CPU covers what was sampled."""
    result = run_quick("suite_cost", tmp_path, capsys)
    figures = result["results"]
    assert figures["tiers"]["unit"]["returncode"] == 0 and figures["tests_clocked"] > 0
    files = [name for name in figures["files"] if name.startswith("tests/unit/suite/test_")]
    assert files and all("pytest worker" in figures["files"][name]["by_kind"] for name in files)
    assert 0 < figures["sampled_cpu_s"] <= figures["busy_cpu_s"] + 2.0
