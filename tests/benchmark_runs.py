"""A benchmark of ``benchmarks/`` run in quick mode from a test: its JSON, checked to be the same on stdout and
in ``--out`` and to have the fields every benchmark's result has."""

import importlib
import json

MACHINE_KEYS = {"platform", "cpu_count", "python"}


def benchmark_module(name):
    return importlib.import_module(f"benchmarks.{name}")


def run_quick(name, tmp_path, capsys, *args):
    """Run a benchmark's main in quick mode; return its JSON, checked to be the same on stdout and in --out."""
    out = tmp_path / f"{name}.json"
    assert benchmark_module(name).main(["--quick", "--out", str(out), *args]) == 0
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
