"""The core install, without the ``dagster`` extra, still plays, diagnoses, revises and trains.

docs/install.md promises that ``pip install .`` runs ``automem rollout``, ``evaluate`` and the
structure loop's stages (``revise --no-tracking``) with neither Dagster nor MLflow installed. A
subprocess makes those packages not installed (a ``sys.meta_path`` finder that answers
``dagster``, ``dagster_*`` and ``mlflow`` as a missing package does), imports what the CLI's core
paths import, prints ``automem --help`` and runs one whole ``automem revise --no-tracking`` round
against a scripted server: it must finish and say it is not shown in Dagster, not die at its end.
"""

import json
import os
import subprocess
import sys

from builders import endpoints_file
from test_dagster_defs import GAME_RULES, meta_rules

CORE_WITHOUT_DAGSTER = r"""
import contextlib, importlib, importlib.abc, io, json, pkgutil, sys
from pathlib import Path


class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top.startswith("dagster") or top == "mlflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
import automem_dagster.commands, automem_dagster.training
from automem_dagster import cli
from automem_dagster.commands import shared
from automem_dagster.loop.storage import Storage

core = ["automem_dagster.rollout.runner", "automem_dagster.meta.diagnose", "automem_dagster.meta.tool_diagnosis"]
for package in (automem_dagster.commands, automem_dagster.training):
    core += [m.name for m in pkgutil.iter_modules(package.__path__, package.__name__ + ".")]
for name in core:
    importlib.import_module(name)
help_text = io.StringIO()
with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
    cli.main(["--help"])
assert "revise" in help_text.getvalue() and "rollout" in help_text.getvalue(), help_text.getvalue()
paths = json.loads(sys.argv[1])
shared.STORAGE = Storage(**{k: Path(v) for k, v in paths.items()})
code = cli.main(["revise", "--game", "crafter", "--episodes", "2", "--max-steps", "3", "--eval-episodes", "2",
                 "--eval-max-steps", "10", "--no-tracking", "--endpoints", sys.argv[2]])
print("loaded:", sorted(m for m in sys.modules if m.partition(".")[0].startswith(("dagster", "mlflow"))))
print("imported:", len(core), "exit:", code)
"""


def test_a_core_install_without_dagster_imports_the_cli_and_runs_a_revise_round(tmp_path, storage, scripted):
    bad = ["not json at all", json.dumps({"rationale": "Only wording changes here, nothing structural at all."})]
    server = scripted(meta_rules(storage, bad) + GAME_RULES)
    paths = {"runs": storage.runs, "scaffolds": storage.scaffolds, "lineage": storage.lineage,
             "specialists": storage.specialists}
    env = {**os.environ, "COLUMNS": "300"}  # the worktree's PYTHONPATH travels; wide lines keep messages whole
    done = subprocess.run([sys.executable, "-c", CORE_WITHOUT_DAGSTER, json.dumps(paths),
                           str(endpoints_file(tmp_path / "endpoints.yaml", server))],
                          capture_output=True, text=True, timeout=300, env=env)
    said = done.stdout + done.stderr  # the round's table on stdout, the stages' lines on stderr (commands/render.py)
    assert done.returncode == 0, said[-6000:]
    assert "loaded: []" in said and "exit: 0" in said
    assert "revision rejected: no valid revision in 3 attempts" in said  # the round ran through its revision step
    assert "Dagster: not installed (the `dagster` extra" in said
    assert storage.storage().load_lineage("crafter").champion().version == 0
