"""Plots are real PNGs that matplotlib reads back; empty input is refused by name."""

import base64

import matplotlib.image
import pytest

from automem_dagster.plots import VersionPoint, plot_behaviour, plot_effects, plot_progression_by_version, png_markdown

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

CANDIDATE = {
    "steps": 200, "unproductive_action_rate": 0.2, "redundant_write_rate": 0.1, "empty_search_rate": 0.4,
    "invalid_action_rate": 0.05, "malformed_turn_rate": 0.01, "model_calls_per_step": 2.0,
    "input_tokens_per_step": 1800.0, "output_tokens_per_step": 35.0, "wall_s_per_step": 0.9, "model_s_per_step": 0.8,
}
CHAMPION = CANDIDATE | {"unproductive_action_rate": 0.3, "input_tokens_per_step": 1500.0, "wall_s_per_step": 0.7}


def assert_png(path, min_width=300):
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[1] >= min_width
    assert image.min() < image.max()  # something was drawn
    assert not list(path.parent.glob(".*.tmp"))


def test_progression_plot(tmp_path):
    points = [
        VersionPoint(0, 8.0, 2.0, "baseline"),
        VersionPoint(1, 12.5, 3.0, "kept"),
        VersionPoint(2, 9.0, 2.5, "rolled_back"),
        VersionPoint(3, 12.5, 3.0, "champion"),
        VersionPoint(4, 14.0, 4.0, "pending"),
    ]
    out = tmp_path / "nested" / "progression.png"
    assert plot_progression_by_version(points, "crafter: progression by version", out) == out
    assert_png(out)


def test_progression_plot_overwrites_atomically(tmp_path):
    out = tmp_path / "p.png"
    out.write_bytes(b"old")
    plot_progression_by_version([VersionPoint(0, 0.0, 0.0, "champion")], "one version, zero progression", out)
    assert_png(out)


def test_progression_plot_refuses_empty_and_unknown(tmp_path):
    with pytest.raises(ValueError, match="points"):
        plot_progression_by_version([], "nothing", tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()
    with pytest.raises(ValueError, match="decision 'won'"):
        VersionPoint(1, 1.0, 0.1, "won")


def test_behaviour_plot(tmp_path):
    out = tmp_path / "behaviour.png"
    assert plot_behaviour(CANDIDATE, CHAMPION, "v4 against v3", out, "v4", "v3") == out
    assert_png(out)


def test_behaviour_plot_refuses_empty(tmp_path):
    with pytest.raises(ValueError, match="'champion'"):
        plot_behaviour(CANDIDATE, {}, "t", tmp_path / "b.png")
    with pytest.raises(ValueError, match="share no rate"):
        plot_behaviour({"steps": 1}, {"steps": 2}, "t", tmp_path / "b.png")


def test_png_markdown_embeds_the_file(tmp_path):
    out = plot_progression_by_version([VersionPoint(0, 5.0, 1.0, "baseline")], "t", tmp_path / "p.png")
    md = png_markdown(out, "progression")
    prefix = "![progression](data:image/png;base64,"
    assert md.startswith(prefix) and md.endswith(")")
    assert base64.b64decode(md[len(prefix):-1]) == out.read_bytes()


def test_agent_points_compare_only_like_with_like():
    from automem_dagster.loop.report import agent_points

    def row(agent="memory", version=0, adapter=None, mean=1.0, seeds="42,43", steps=10, role="champion", decision=None,
            settings=None, calls=None):
        return {"game": "crafter", "agent": agent, "version": version, "adapter": adapter, "progression_mean": mean,
                "progression_se": 0.5, "seeds": seeds, "max_steps": steps, "role": role, "decision": decision,
                "settings": settings or {}, "model_calls_per_step": calls}

    rows = [  # newest first, as Tracker.runs_for returns them
        row(agent="summary", mean=2.5, role="baseline", settings={"every": 8}, calls=1.125),
        row(agent="rag", mean=2.2, role="baseline", settings={"retriever": "embedding"}, calls=2.0),
        row(agent="rag", mean=1.9, role="baseline", settings={"retriever": "bm25"}, calls=1.0),
        row(agent="rag", mean=0.1, role="baseline", settings={"retriever": "bm25"}),   # older: ignored
        row(agent="window", mean=1.2, role="baseline"),
        row(adapter="a1", mean=4.0, role="specialist", decision="rolled_back"),
        row(mean=2.0),
        row(version=1, mean=3.0, role="candidate", decision="kept"),
        row(agent="cot", mean=1.5, role="baseline"),
        row(agent="random", mean=5.0, role="baseline"),
        row(agent="random", mean=9.0, role="baseline"),            # older run of the same agent: ignored
        row(mean=7.0, seeds="42,43,44"),                           # another seed set: not comparable
        row(mean=7.0, steps=50),                                   # another step budget: not comparable
        row(adapter="a1", mean=None, role="training"),             # a training run has no progression
    ]
    points = agent_points(rows, "crafter", "42,43", 10)
    assert [(p.label, p.mean, p.kind) for p in points] == [
        ("random", 5.0, "baseline"), ("window", 1.2, "baseline"), ("cot", 1.5, "baseline"),
        ("rag (bm25)", 1.9, "baseline"), ("rag (embedding)", 2.2, "baseline"), ("summary", 2.5, "baseline"),
        ("v0", 2.0, "champion"), ("v1", 3.0, "kept"), ("v0 + a1", 4.0, "specialist")]
    assert [p.costs.get("model_calls_per_step") for p in points[3:6]] == [1.0, 2.0, 1.125] and points[0].costs == {}


def test_effects_histogram_has_a_panel_per_unit_and_refuses_nothing_kept(tmp_path):
    values = [[50.0, "progression", "replayed"]] * 3 + [[-3.0, "progression", "unmeasured"], [0.5, "reward", "unmeasured"]]
    out = tmp_path / "effects.png"
    assert plot_effects(values, "effects of the 5 kept decisions", out) == out
    assert_png(out, min_width=800)  # two panels side by side
    with pytest.raises(ValueError, match="no kept decisions to plot"):
        plot_effects([], "effects", tmp_path / "none.png")
