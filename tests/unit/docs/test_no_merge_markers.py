"""No source or documentation file holds a merge's conflict markers: a merge once left both sides of a
section of docs/proficiency-loop.md in main, markers and all, and nothing read it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.M)
FOLDERS = ("automem_dagster", "tests", "docs", "benchmarks", "deploy", "assets", "examples", "dvc_templates", ".ci")
TOP = ("README.md", "Makefile", "dvc.yaml", "params.yaml", "setup.cfg", "pyproject.toml", "constraints.txt")
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".sh", ".j2", ".json", ""}


def text_files():
    for folder in FOLDERS:
        yield from (p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in TEXT)
    yield from (ROOT / name for name in TOP if (ROOT / name).is_file())


def test_no_file_holds_conflict_markers():
    marked = [str(p.relative_to(ROOT)) for p in text_files() if MARKER.search(p.read_text(errors="replace"))]
    assert marked == [], f"conflict markers left by a merge in: {marked}"
