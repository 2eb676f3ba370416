"""The project home the tests run against: the committed ``assets/`` and ``deploy/``, never the live ones.

Importing this module points ``$AUTOMEM_HOME`` at a fresh temporary copy of what ``HEAD`` holds, before the
package computes its paths (``automem_dagster/paths.py``), so scaffold stores, lineages, seed sets and
specialist registries built by a test start from the committed state whatever a user's own rounds left
in the checkout. conftest.py imports it first. Outside a git checkout (an unpacked source archive) the
checkout's files are copied instead, and the pytest header says so.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT_DATA = ("assets", "deploy")


def committed_copy(root: Path, dest: Path) -> str:
    """Copy ``PROJECT_DATA`` as ``HEAD`` holds it into ``dest``; returns a line for the pytest header."""
    try:
        archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", "HEAD", *PROJECT_DATA],
                                 capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        for name in PROJECT_DATA:
            shutil.copytree(root / name, dest / name)
        return f"project data: copied from {root} ({exc}: not a git checkout)"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", *PROJECT_DATA],
                             capture_output=True, text=True).stdout.splitlines()
    note = f"; {len(changed)} uncommitted change(s) there are not used" if changed else ""
    return f"project data: assets/ and deploy/ as committed at HEAD, copied to {dest}{note}"


def _start() -> str:
    home = Path(tempfile.mkdtemp(prefix="automem-tests-home-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    note = committed_copy(ROOT, home)
    os.environ["AUTOMEM_HOME"] = str(home)
    return note


HEADER = _start()
"""What the tests run against, for the pytest header (``pytest_report_header`` in conftest.py)."""
