"""Plots are real PNGs that matplotlib reads back; empty input is refused by name."""

import base64

import matplotlib.image
import pytest

from automem_dagster.plots import VersionPoint, plot_behaviour, plot_progression_by_version, png_markdown

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
