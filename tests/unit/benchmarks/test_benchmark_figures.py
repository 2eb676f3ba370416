"""The benchmarks' figures and quick runs that need nothing running: cost figures, the growth rule, plots,
targets, the speedup sums, the memory store's quick run and the training benchmark's dataset. These
check the benchmarks, not the speed of anything: no figure is compared with a threshold."""


import builders
import pytest
from benchmark_runs import benchmark_module, run_quick


def test_memory_store_quick(tmp_path, capsys):
    result = run_quick("memory_store", tmp_path, capsys)
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
    common = benchmark_module("common")
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
    common = benchmark_module("common")
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
    out = benchmark_module("step_cost").plot_tokens_per_step(episodes, "test", tmp_path / "plot.png")
    assert out.read_bytes().startswith(b"\x89PNG")


def test_step_cost_memory_work_and_reference_targets():
    """The memory work counts what the model did (writes in LOG calls, reads in consultation calls) and
    the steps that reused a consultation; the reference targets are issue 29's five."""
    bench = benchmark_module("step_cost")
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
    figures = benchmark_module("common").cost_figures(episodes)
    figures["memory_work"] = work
    targets = {t["name"]: t["verdict"] for t in bench._reference_targets(figures)}
    assert len(targets) == 5 and set(targets.values()) == {"PASS"}       # 1.67 calls a step, 167 tokens a step
    figures["memory_work"] = {**work, "writes": 0}
    assert [t["verdict"] for t in bench._reference_targets(figures)].count("MISS") == 1


def test_step_cost_reference_settings(tmp_path):
    from automem_dagster.llm.config import load_endpoints
    from automem_dagster.paths import DEFAULT_ENDPOINTS

    bench = benchmark_module("step_cost")
    config = bench.reference_config(load_endpoints(DEFAULT_ENDPOINTS))
    assert config.game.temperature == 0.0 and config.game.max_tokens == 160
    assert config.meta == load_endpoints(DEFAULT_ENDPOINTS).meta                 # only the game role is changed
    with pytest.raises(SystemExit):
        bench.main(["--reference", "--quick"])                                    # the reference fixes the size


def test_concurrency_speedup_over_sequential():
    conc = benchmark_module("concurrency")
    assert conc.schedule([1, 2, 4], 2) == [(0, 1), (0, 2), (0, 4), (1, 4), (1, 2), (1, 1)]
    episode = [_step(i, [("plan", 100, 5)]) for i in range(5)]

    def runs(elapsed):
        return [{"episodes": [episode] * 4, "elapsed_s": elapsed, "connect_s": 1.0, "load_before": None,
                 "load_after": None}]

    per = {1: conc.setting_figures(runs(120.0)), 2: conc.setting_figures(runs(60.0))}
    assert per[1]["episodes_per_min"] == 2.0 and per[2]["steps_per_min"] == 20.0
    assert per[2]["tokens_per_s"] == 4 * 5 * 105 / 60
    assert conc.speedups(per)[2] == {"episodes_per_min": 2.0, "steps_per_min": 2.0, "tokens_per_s": 2.0}


# --- training_throughput: its dataset, and a quick run on the embedded base ---

def test_training_throughput_dataset_is_a_valid_curated_dataset(tmp_path):
    from automem_dagster.training.examples import load_examples, split_examples

    stats = benchmark_module("training_throughput").synthetic_dataset(tmp_path, examples=30, episodes=4, seed=0)
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
    benchmark_module("training_throughput").synthetic_dataset(again, examples=30, episodes=4, seed=0)
    assert (again / "dataset.parquet").read_bytes() == (tmp_path / "dataset.parquet").read_bytes()  # deterministic


def test_load_generator_refuses_an_unknown_client(capsys):
    with pytest.raises(SystemExit):
        benchmark_module("load_generator").main(["--quick", "--clients", "bare,curl"])
    assert "--clients: unknown curl; choose from bare, sdk-httpx, sdk-aiohttp, project" in capsys.readouterr().err
