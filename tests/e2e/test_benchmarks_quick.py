"""The benchmarks' quick runs on the embedded model and base: each finishes and emits its JSON with a verdict
per target. These check the benchmarks, not the speed of anything: no figure is compared with a threshold."""


import pytest
from benchmark_runs import run_quick


@pytest.mark.server
def test_harness_overhead_quick(tmp_path, capsys):
    result = run_quick("harness_overhead", tmp_path, capsys)
    settings = result["settings"]
    assert set(result["results"]) == set(settings["games"]) == {"crafter", "minihack:Corridor-R3", "nethack"}
    for game, f in result["results"].items():
        assert f["steps"] == settings["episodes"][game] * settings["max_steps"][game]
        assert {"harness", "game", "model", "wall", "share_outside_model", "agent_steps_per_s"} <= f.keys()
        assert {"request", "game", "client_and_event_loop", "harness", "process"} <= f["cpu_ms_per_step"].keys()
        assert f["ledger_vs_wall"]["wall_harness_ms"] == f["harness"]["mean_ms"]   # tests/test_cpu_ledger.py: the sums
    assert [t["game"] for t in result["targets"]] == settings["games"]
    if any(t["verdict"] == "MISS" for t in result["targets"]):
        assert len(result["profile"]["top_cumulative"]) == 10


@pytest.mark.e2e
def test_training_throughput_quick(tmp_path, capsys):
    """The project's training stage and the plain transformers + peft loop on the embedded base, two
    steps each: both measured, the ratio theirs, the effective batch kept through accumulation."""
    result = run_quick("training_throughput", tmp_path, capsys)
    r, batch = result["results"], result["settings"]["lora"]["batch_size"]
    assert r["steps"] == r["ceiling"]["steps"] == 2 and batch == 2
    assert r["tokens_per_second"] > 0 and r["ceiling"]["tokens_per_second"] > 0
    assert r["project_over_ceiling"] == pytest.approx(r["tokens_per_second"] / r["ceiling"]["tokens_per_second"])
    assert r["trained_on"]["micro_batch"] * r["trained_on"]["gradient_accumulation"] == batch
    assert r["device_name"] and r["validation_loss_before"] > 0
    assert [t["name"] for t in result["targets"]][0] == "peak RSS of the training process"


@pytest.mark.integration
@pytest.mark.server
def test_crn_narrowing_quick_on_the_embedded_model(tmp_path, capsys):
    """Integration: B with A's sampling seeds decides like A more often than B with its own seeds."""
    result = run_quick("crn_narrowing", tmp_path, capsys)
    agreement = result["results"]["action_agreement"]
    assert agreement["shared"] > agreement["independent"]
    assert result["results"]["reward"]["se_shared"] <= result["results"]["reward"]["se_independent"]


@pytest.mark.server
def test_rollout_scaling_quick(tmp_path, capsys):
    result = run_quick("rollout_scaling", tmp_path, capsys)
    levels = result["results"]["levels"]
    assert set(levels) == {"1", "4"} and levels["1"]["efficiency"] == 1.0
    for figures in [*levels.values(), result["results"]["sharded"]]:
        assert figures["steps"] == figures["episodes"] * result["settings"]["max_steps"]
        assert figures["steps_per_s"] > 0 and 1 < figures["model_calls_per_step"] <= 2   # no LOG turn at step 0
        bound = figures["cpu_bound"]
        assert bound["cores"] >= 1 and bound["steps_per_s"] == pytest.approx(bound["cores"] / bound["cpu_s_per_step"])
    sharded, alone = result["results"]["sharded"], result["results"]["one_shards_episodes_alone"]
    assert alone["episodes"] == result["results"]["saturation_level"] // 2
    assert result["targets"][1]["speedup_shares_alone_allow"] == pytest.approx(
        2 * alone["steps_per_s"] / levels[str(result["results"]["saturation_level"])]["steps_per_s"])
    assert sharded["processes"] == 2 and len(sharded["shard_windows_s"]) == 2
    assert min(w[0] for w in sharded["shard_windows_s"]) == 0 and all(w[1] > w[0] for w in sharded["shard_windows_s"])
    assert max(w[1] for w in sharded["shard_windows_s"]) == pytest.approx(sharded["elapsed_s"])
    assert [t["name"].split(" ")[0] for t in result["targets"]] == ["efficiency", "2", "harness"]
    top = levels["4"]
    efficiency, harness = result["targets"][0], result["targets"][2]
    assert efficiency["value"] == pytest.approx(top["efficiency"], abs=1e-6)
    assert efficiency["efficiency_one_interpreter_allows"] == pytest.approx(
        1 / top["process_cpu_s_per_step"] / (4 * levels["1"]["steps_per_s"]))
    assert harness["value"] == pytest.approx(top["cpu_ms_per_step"]["harness"], abs=1e-6) and harness["limit"] == 3.0
    assert result["targets"][1]["speedup_cpu_bound_allows"] > 0 and "shard_speedup_cpu_bound_allows" not in result["results"]
    saturated = levels[str(result["results"]["saturation_level"])]
    assert result["targets"][1]["speedup_latency_allows"] == pytest.approx(1 / saturated["efficiency"])


@pytest.mark.server
def test_load_generator_quick_with_every_client(tmp_path, capsys):
    """Each client drives the stand-in through its measured window and is charged its own CPU per request; only the
    bare client carries the stand-in's target."""
    result = run_quick("load_generator", tmp_path, capsys, "--clients", "bare,sdk-httpx,sdk-aiohttp,project")
    level = result["results"]["4"]
    assert list(level) == ["bare", "sdk-httpx", "sdk-aiohttp", "project"]
    for client, figures in level.items():
        assert figures["client"] == client and figures["requests"] > 0 and figures["generator_cpu_ms_per_request"] > 0
        assert 0 < figures["sustained"] <= 1.05 and figures["latency"]["median_ms"] >= 50   # the stand-in's 50 ms
    assert level["bare"]["connections_opened"] == 4 and level["project"]["connections_opened"] is None
    assert [t["name"] for t in result["targets"]] == ["stand-in alone at 4 in flight: share of 4 / latency sustained"]


@pytest.mark.server
def test_meta_modes_quick(tmp_path, capsys):
    result = run_quick("meta_modes", tmp_path, capsys, "--work", str(tmp_path / "work"))
    modes = result["results"]
    assert list(modes) == ["one call, 8k context", "one call, 128k context", "tools"]
    assert modes["tools"]["steps_read"] == {"minihack-Corridor-R3__seed7": "150-170"}
    assert modes["tools"]["steps_shown_verbatim"] == 21 and modes["tools"]["tool_calls"] >= 2
    assert modes["one call, 128k context"]["steps_shown_verbatim"] == 200 and result["verdict"] == "no targets"
    assert all(m["attempts"] == 1 for m in modes.values())  # each cites a step it was shown


@pytest.mark.server
def test_resume_cost_quick(tmp_path, capsys):
    result = run_quick("resume_cost", tmp_path, capsys, "--games", "minihack:Corridor-R3")
    f, s = result["results"]["minihack:Corridor-R3"], result["settings"]
    assert f["resumed_at"] == s["stop"] and f["steps"] == s["max_steps"]
    assert f["resumed_requests"] == f["requests_of_played_steps"] < f["full_requests"]
    assert [(t["name"], t["source"]) for t in result["targets"]] == [
        ("model requests for replayed steps", "issue"), ("replayed step / played step (time)", "proposed")]
    assert result["targets"][0]["verdict"] == "PASS"
