"""`make run` then `make test` in one clone: the demo plays in a project home of its own and leaves the
checkout's versioned files as they were (issue: the demo once wrote v1.yaml, the lineage and the
specialist registry into ``assets/``, and the tests then built their stores from that state)."""

import os
import subprocess
import sys
from pathlib import Path

from builders import endpoints_file
from dagster_round_rules import GAME_RULES

from automem_dagster.loop.storage import Storage

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_leaves_a_clean_clone_clean(tmp_path, scripted):
    """``automem demo`` (this checkout's code) on a fresh clone of this repository as its project root,
    its models a scripted stand-in: its structure round registers a candidate and updates a lineage, and
    still the clone's ``git status`` shows nothing. The candidate and the lineage are in the demo's home."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    server = scripted(GAME_RULES + [{"match": "review its memory decisions", "reply": '{"verdicts": []}'}])
    endpoints = endpoints_file(tmp_path / "endpoints.yaml", server)
    env = {**os.environ, "AUTOMEM_HOME": str(clone), "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "automem_dagster.cli", "demo", "--endpoints", str(endpoints)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "project home:" in run.stderr  # the console's messages go to stderr, the tables to stdout
    # 2 seeds: the structure round is inconclusive and nothing is kept (issue 42: the demo tells the truth)
    said = run.stdout + run.stderr
    assert "inconclusive" in said and "kept:" not in said and "beats champion" not in said
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True).stdout
    assert status == "", f"the demo changed the clone's versioned files:\n{status}"
    home = Storage.under(clone / "runs" / "demo")
    assert (home.lineage / "crafter.json").exists() and (home.scaffolds / "crafter" / "v1.yaml").exists()
