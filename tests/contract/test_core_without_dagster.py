"""The core install, without the ``dagster`` extra, still plays, diagnoses and revises, stage by stage.

docs/install.md promises that ``pip install .`` runs the stage commands with neither Dagster nor
MLflow installed, and that a whole round (a Dagster run, ``defs/cli_rounds.py``) is refused with what
to do instead. A subprocess makes those packages not installed (a ``sys.meta_path`` finder that
answers ``dagster``, ``dagster_*`` and ``mlflow`` as a missing package does), imports what the CLI's
core paths import, prints ``automem --help``, runs a round's first stages against a scripted server
(``rollout --training``, ``diagnose``, ``propose --register``) and then asks for a whole round.
"""

import json
import os
import subprocess
import sys

from builders import endpoints_file
from dagster_round_rules import GAME_RULES, meta_rules, winning_patch

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
runs, endpoints = Path(paths["runs"]), sys.argv[2]
stages = [["rollout", "--game", "crafter", "--training", "--rollout-episodes", "2", "--rollout-max-steps", "3",
           "--out", str(runs / "batch")],
          ["diagnose", "--game", "crafter", "--batch", str(runs / "batch"), "--out", str(runs / "diagnosis")],
          ["propose", "--game", "crafter", "--diagnosis", str(runs / "diagnosis"), "--register"]]
codes = [cli.main(stage + ["--endpoints", endpoints]) for stage in stages]
whole = cli.main(["revise", "--game", "crafter", "--rollout-episodes", "2", "--rollout-max-steps", "3", "--no-tracking",
                  "--endpoints", endpoints])
print("loaded:", sorted(m for m in sys.modules if m.partition(".")[0].startswith(("dagster", "mlflow"))))
print("imported:", len(core), "stages:", codes, "whole round:", whole)
"""


def test_a_core_install_without_dagster_runs_the_stages_and_refuses_a_whole_round_with_what_to_do(
        tmp_path, storage, scripted):
    server = scripted(meta_rules(storage, [winning_patch()]) + GAME_RULES)
    paths = {"runs": storage.runs, "scaffolds": storage.scaffolds, "lineage": storage.lineage,
             "specialists": storage.specialists}
    env = {**os.environ, "COLUMNS": "300"}  # the worktree's PYTHONPATH travels; wide lines keep messages whole
    done = subprocess.run([sys.executable, "-c", CORE_WITHOUT_DAGSTER, json.dumps(paths),
                           str(endpoints_file(tmp_path / "endpoints.yaml", server))],
                          capture_output=True, text=True, timeout=300, env=env)
    said = done.stdout + done.stderr  # results on stdout, the stages' lines and errors on stderr (commands/render.py)
    assert done.returncode == 0, said[-6000:]
    assert "loaded: []" in said and "stages: [0, 0, 0] whole round: 2" in said, said[-3000:]
    assert "1 findings" in said and "candidate v1:" in said  # diagnosed and revised without Dagster
    assert "a whole round runs as a Dagster run" in said and "pip install '.[dagster]'" in said
    lineage = storage.storage().load_lineage("crafter")
    assert lineage.champion().version == 0 and lineage.record(1).decision is None  # registered, pending
