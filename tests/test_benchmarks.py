"""The benchmarks work: each ``--quick`` run finishes and emits its JSON with a verdict per target.

These check the benchmarks, not the speed of anything: no figure is compared with a threshold.
"""

import importlib
import json
from pathlib import Path

import builders
import pytest

ROOT = Path(__file__).resolve().parents[1]
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
        assert t["verdict"] in ("PASS", "MISS", "bounded by CPU")
    assert result["verdict"] in ("PASS", "MISS", "bounded by CPU", "no targets")
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


@pytest.mark.contract
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


@pytest.mark.server
def test_harness_overhead_quick(tmp_path, capsys):
    result = _run("harness_overhead", tmp_path, capsys)
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


def test_harness_overhead_profile_and_endpoints_file(tmp_path, capsys, scripted):
    game = "minihack:Corridor-R3"
    profiled = _run("harness_overhead", tmp_path, capsys, "--games", game, "--profile")
    assert profiled["profile"]["game"] == game and len(profiled["profile"]["top_cumulative"]) == 10

    # --endpoints: the variant meant for real models, here pointed at a scripted server.
    server = scripted(_bench("harness_overhead").scripted_rules("search"))
    endpoints = builders.endpoints_file(tmp_path / "endpoints.yaml", server, ("game",))
    result = _run("harness_overhead", tmp_path, capsys, "--games", game, "--endpoints", str(endpoints))
    assert result["settings"]["endpoint"] == str(endpoints)
    [t] = result["targets"]
    assert t["comparison"] == "<" and t["limit"] == 0.02 and t["unit"] == "share"


# --- the benchmarks with a model (step_cost, concurrency, context_cost) ------------------------
# Their figures come from pure functions over trajectory step records, tested here on constructed
# records; their command lines run against a scripted endpoint. Nothing here starts the embedded model.

def _step(i, turns, valid=True, wall=0.5):
    """A step record as the runner writes it; ``turns`` are (phase, input tokens, output tokens)."""
    made = [builders.turn(p, input_tokens=n_in, output_tokens=n_out) for p, n_in, n_out in turns]
    return builders.step("noop", made, valid=valid, observation="", wall_s=wall, step=i)


def _write_batch(batch, episodes):
    from automem_dagster.rollout.trajectory import TrajectoryWriter, trajectory_path

    for seed, steps in enumerate(episodes):
        writer = TrajectoryWriter(trajectory_path(batch, f"crafter__seed{seed}"), {"episode": seed})
        for s in steps:
            writer.step(s)
        writer.finish({"steps": len(steps)})


def test_cost_figures_sum_the_calls_of_a_step(tmp_path):
    common = _bench("common")
    episodes = [
        [_step(0, [("plan", 900, 10)]), _step(1, [("log", 1000, 20), ("log", 1100, 10), ("plan", 1000, 10)])],
        [_step(0, [("plan", 900, 10)], valid=False, wall=1.5)],
    ]
    _write_batch(tmp_path / "batch", episodes)
    read = common.batch_episodes(tmp_path / "batch")
    assert [len(ep) for ep in read] == [2, 1]
    f = common.cost_figures(read)
    assert f["steps"] == 3 and f["model_calls"] == 5 and f["episodes"] == 2
    assert f["input_tokens_per_step"]["mean"] == pytest.approx((900 + 3100 + 900) / 3, abs=1e-3)
    assert f["input_tokens_per_step"]["max"] == 3100 and f["output_tokens_per_step"]["max"] == 40
    assert f["input_tokens_per_call"]["mean"] == 4900 / 5
    assert f["calls_per_step_by_phase"] == pytest.approx({"log": 2 / 3, "plan": 1.0})
    assert f["input_tokens_per_step_by_phase"]["log"] == pytest.approx(2100 / 3)
    assert f["valid_action_rate"] == pytest.approx(2 / 3) and f["wall_s_per_step"]["median"] == 0.5
    assert f["total_tokens_per_episode"]["mean"] == (910 + 3140 + 910) / 2
    series = common.by_step_index(read, lambda s: common.step_tokens(s)[0])
    assert series == [[900, 900], [3100]] and common.index_means(series) == [900, 3100]


def test_growth_rule_passes_a_flat_series_and_misses_linear_growth():
    common = _bench("common")
    verdicts = lambda g: [t["verdict"] for t in common.growth_targets("x", g)]  # noqa: E731
    flat = [[1000, 1010] for _ in range(32)]
    g = common.growth(flat)
    assert g["steps"] == 32 and g["quarter_steps"] == 8 and abs(g["slope_per_step"]) < 1e-9
    assert g["last_over_first_quarter"] == 1.0 and verdicts(g) == ["PASS", "PASS"]

    linear = [[1000 + 50 * i] for i in range(32)]
    g = common.growth(linear)
    assert abs(g["slope_per_step"] - 50) < 1e-9
    assert abs(g["slope_times_steps_over_mean"] - 50 * 32 / 1775) < 1e-9
    assert abs(g["last_over_first_quarter"] - 2375 / 1175) < 1e-9
    assert verdicts(g) == ["MISS", "MISS"]

    # A context that fills in the first steps, then stays flat: the first quarter is cheaper.
    filling = [[min(500 + 250 * i, 2000)] for i in range(32)]
    g = common.growth(filling)
    assert g["last_over_first_quarter"] > 1.25 and verdicts(g)[1] == "MISS"
    # One step index cannot show a trend: unmeasured, so MISS.
    assert verdicts(common.growth([[1000]])) == ["MISS", "MISS"]
    assert common.growth([])["steps"] == 0


def test_step_cost_plot_is_a_png(tmp_path):
    episodes = [[_step(i, [("log", 1000 + i, 12), ("plan", 900, 9)]) for i in range(6)] for _ in range(2)]
    out = _bench("step_cost").plot_tokens_per_step(episodes, "test", tmp_path / "plot.png")
    assert out.read_bytes().startswith(b"\x89PNG")


def test_step_cost_memory_work_and_reference_targets():
    """The memory work counts what the model did (writes in LOG calls, reads in consultation calls) and
    the steps that reused a consultation; the reference targets are issue 29's five."""
    bench = _bench("step_cost")
    read = {"op": "<|READ|>strategy.txt", "ok": True, "result": "x"}
    wrote = {"op": "<|APPEND|>notes.txt|x", "ok": True, "result": "appended", "changed": True}
    refused = {"op": "<|APPEND|>../x|x", "ok": False, "result": "refused"}
    episodes = [[
        _step(0, []) | {"turns": [builders.turn("plan", ops=[read]), builders.turn("plan")]},
        _step(1, []) | {"turns": [builders.turn("log", ops=[wrote, refused]), builders.turn("action")],
                        "memory_context": {"reused_consultation": {"step": 0, "results": ["x"]}}},
        _step(2, [("action", 100, 5)]) | {"memory_context": {"reused_consultation": {"step": 0, "results": ["x"]}}},
    ]]
    work = bench.memory_work(episodes)
    assert work == {"log_calls": 1, "writes": 1, "writes_changed": 1, "reads": 1, "consultations": 1,
                    "reused_consultations": 2}
    figures = _bench("common").cost_figures(episodes)
    figures["memory_work"] = work
    targets = {t["name"]: t["verdict"] for t in bench._reference_targets(figures)}
    assert len(targets) == 5 and set(targets.values()) == {"PASS"}       # 1.67 calls a step, 167 tokens a step
    figures["memory_work"] = {**work, "writes": 0}
    assert [t["verdict"] for t in bench._reference_targets(figures)].count("MISS") == 1


def test_step_cost_reference_settings(tmp_path):
    from automem_dagster.llm.config import load_endpoints
    from automem_dagster.paths import DEFAULT_ENDPOINTS

    bench = _bench("step_cost")
    config = bench.reference_config(load_endpoints(DEFAULT_ENDPOINTS))
    assert config.game.temperature == 0.0 and config.game.max_tokens == 160
    assert config.meta == load_endpoints(DEFAULT_ENDPOINTS).meta                 # only the game role is changed
    with pytest.raises(SystemExit):
        bench.main(["--reference", "--quick"])                                    # the reference fixes the size


def test_concurrency_speedup_over_sequential():
    conc = _bench("concurrency")
    assert conc.schedule([1, 2, 4], 2) == [(0, 1), (0, 2), (0, 4), (1, 4), (1, 2), (1, 1)]
    episode = [_step(i, [("plan", 100, 5)]) for i in range(5)]

    def runs(elapsed):
        return [{"episodes": [episode] * 4, "elapsed_s": elapsed, "connect_s": 1.0, "load_before": None,
                 "load_after": None}]

    per = {1: conc.setting_figures(runs(120.0)), 2: conc.setting_figures(runs(60.0))}
    assert per[1]["episodes_per_min"] == 2.0 and per[2]["steps_per_min"] == 20.0
    assert per[2]["tokens_per_s"] == 4 * 5 * 105 / 60
    assert conc.speedups(per)[2] == {"episodes_per_min": 2.0, "steps_per_min": 2.0, "tokens_per_s": 2.0}


def _scripted_endpoints(tmp_path, scripted):
    server = scripted([{"match": "Phase: LOG", "reply": "<|DONE|>"},
                       {"match": "", "reply": "<|ACTION|>noop<|END|>"}],  # PLAN turns and the baselines
                      embeddings=True)
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(f"game: {{name: game, base_url: '{server.base_url}', constrained: none}}\n"
                         f"embed: {{name: embed, base_url: '{server.base_url}'}}\n")  # the rag baseline's embeddings
    return str(endpoints)


def test_step_cost_quick_on_a_scripted_endpoint(tmp_path, capsys, scripted):
    result = _run("step_cost", tmp_path, capsys, "--endpoints", _scripted_endpoints(tmp_path, scripted))
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
    result = _run("concurrency", tmp_path, capsys, "--endpoints", _scripted_endpoints(tmp_path, scripted))
    by_slots = result["results"]["by_slots"]
    assert set(by_slots) == {str(n) for n in result["settings"]["slots"]} and "1" in by_slots
    assert by_slots["1"]["speedup_over_sequential"]["episodes_per_min"] == 1.0
    for f in by_slots.values():
        assert f["episodes"] == result["settings"]["episodes"] and f["episodes_per_min"] > 0
    assert [t["source"] for t in result["targets"]] == ["issue"] * (len(by_slots) - 1)


def test_context_cost_quick_on_a_scripted_endpoint(tmp_path, capsys, scripted):
    extra = tmp_path / "candidate.yaml"
    extra.write_text((ROOT / "assets/scaffolds/crafter/v0.yaml").read_text().replace("log_max_ops: 5", "log_max_ops: 3"))
    result = _run("context_cost", tmp_path, capsys, "--endpoints", _scripted_endpoints(tmp_path, scripted),
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


# --- training_throughput: its dataset, and a quick run on the embedded base ---

def test_training_throughput_dataset_is_a_valid_curated_dataset(tmp_path):
    from automem_dagster.training.examples import load_examples, split_examples

    stats = _bench("training_throughput").synthetic_dataset(tmp_path, examples=30, episodes=4, seed=0)
    rows = load_examples(tmp_path)  # the trainer's own checks
    assert len(rows) == stats["examples"] == 30 and stats["episodes"] == 4
    assert stats["phases"]["log"] > 0 and stats["phases"]["plan"] > 0
    assert 700 < stats["prompt_chars_mean"] < 1400  # about 300 tokens of the embedded base's tokenizer
    for r in rows:
        user, ops = r["prompt"][-1]["content"], r["completion"][0]["content"].splitlines()
        assert f"Phase: {r['phase'].upper()}." in user and ops[-1] == "<|DONE|>"
        writes = r["phase"] == "log"  # LOG writes; PLAN only reads
        assert all(op.startswith(("<|UPSERT|>", "<|APPEND|>") if writes else ("<|READ|>", "<|SEARCH|>")) for op in ops[:-1])
    assert split_examples([r["episode"] for r in rows], 0.1, 0).by == "episode"
    again = tmp_path / "again"
    _bench("training_throughput").synthetic_dataset(again, examples=30, episodes=4, seed=0)
    assert (again / "dataset.parquet").read_bytes() == (tmp_path / "dataset.parquet").read_bytes()  # deterministic


@pytest.mark.e2e
def test_training_throughput_quick(tmp_path, capsys):
    """The project's training stage and the plain transformers + peft loop on the embedded base, two
    steps each: both measured, the ratio theirs, the effective batch kept through accumulation."""
    result = _run("training_throughput", tmp_path, capsys)
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
    result = _run("crn_narrowing", tmp_path, capsys)
    agreement = result["results"]["action_agreement"]
    assert agreement["shared"] > agreement["independent"]
    assert result["results"]["reward"]["se_shared"] <= result["results"]["reward"]["se_independent"]


@pytest.mark.server
def test_rollout_scaling_quick(tmp_path, capsys):
    result = _run("rollout_scaling", tmp_path, capsys)
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
    result = _run("load_generator", tmp_path, capsys, "--clients", "bare,sdk-httpx,sdk-aiohttp,project")
    level = result["results"]["4"]
    assert list(level) == ["bare", "sdk-httpx", "sdk-aiohttp", "project"]
    for client, figures in level.items():
        assert figures["client"] == client and figures["requests"] > 0 and figures["generator_cpu_ms_per_request"] > 0
        assert 0 < figures["sustained"] <= 1.05 and figures["latency"]["median_ms"] >= 50   # the stand-in's 50 ms
    assert level["bare"]["connections_opened"] == 4 and level["project"]["connections_opened"] is None
    assert [t["name"] for t in result["targets"]] == ["stand-in alone at 4 in flight: share of 4 / latency sustained"]


def test_load_generator_refuses_an_unknown_client(capsys):
    with pytest.raises(SystemExit):
        _bench("load_generator").main(["--quick", "--clients", "bare,curl"])
    assert "--clients: unknown curl; choose from bare, sdk-httpx, sdk-aiohttp, project" in capsys.readouterr().err


@pytest.mark.server
def test_meta_modes_quick(tmp_path, capsys):
    result = _run("meta_modes", tmp_path, capsys, "--work", str(tmp_path / "work"))
    modes = result["results"]
    assert list(modes) == ["one call, 8k context", "one call, 128k context", "tools"]
    assert modes["tools"]["steps_read"] == {"minihack-Corridor-R3__seed7": "150-170"}
    assert modes["tools"]["steps_shown_verbatim"] == 21 and modes["tools"]["tool_calls"] >= 2
    assert modes["one call, 128k context"]["steps_shown_verbatim"] == 200 and result["verdict"] == "no targets"
    assert all(m["attempts"] == 1 for m in modes.values())  # each cites a step it was shown


@pytest.mark.server
def test_resume_cost_quick(tmp_path, capsys):
    result = _run("resume_cost", tmp_path, capsys, "--games", "minihack:Corridor-R3")
    f, s = result["results"]["minihack:Corridor-R3"], result["settings"]
    assert f["resumed_at"] == s["stop"] and f["steps"] == s["max_steps"]
    assert f["resumed_requests"] == f["requests_of_played_steps"] < f["full_requests"]
    assert [(t["name"], t["source"]) for t in result["targets"]] == [
        ("model requests for replayed steps", "issue"), ("replayed step / played step (time)", "proposed")]
    assert result["targets"][0]["verdict"] == "PASS"
