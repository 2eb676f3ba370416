"""A copy of this checkout's DVC pipeline (dvc.yaml, params.yaml, the project data) in a folder, for
tests that run single stages with the real ``dvc`` (``.venv-dvc``) on stand-in data, or that take a
stage's command exactly as DVC substitutes its parameters (``dvc repro --dry``) to run it in process.
The whole pipeline with the embedded model is tests/e2e/test_dvc.py's (integration)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from automem_dagster.loop.storage import Storage
from automem_dagster.paths import ASSETS

REPO = Path(__file__).resolve().parents[1]
DVC = REPO / ".venv-dvc" / "bin" / "dvc"
BIN = Path(sys.executable).parent  # the environment running the tests, which holds `automem`
PROJECT_FILES = ("dvc.yaml", "params.yaml", ".dvcignore", "assets", "dvc_templates")


def copy_project(names, root: Path) -> None:
    """Copy ``names`` from the checkout into ``root``; ``assets`` from the tests' committed copy
    (``pristine_home.py``), not the checkout's live scaffold store, lineage and registry."""
    for name in names:
        source = ASSETS if name == "assets" else REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, root / name)


def set_params(path: Path, **values) -> None:
    """Set parameters in the params.yaml at ``path`` as `dvc exp run -S group.key=value` would: a group
    given as a dict is merged into its own, so the group's other keys (e.g. ``rollout.seed_block``) stay."""
    params = yaml.safe_load(path.read_text())
    for key, value in values.items():
        params[key] = {**params[key], **value} if isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(params, sort_keys=False))


class StageProject:
    """A DVC project (no git) holding the pipeline; ``automem`` in its stages is this environment's."""

    def __init__(self, root: Path):
        if not DVC.exists():
            pytest.fail(f"DVC is not installed at {DVC}: run `make dvc-install` (DVC lives in its own environment)")
        self.root = root
        self.env = {**os.environ, "AUTOMEM_HOME": str(root), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                    "DVC_NO_ANALYTICS": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get(
                        "PYTHONPATH")]))}
        root.mkdir()
        copy_project(PROJECT_FILES, root)
        self.dvc("init", "--no-scm", "-q")

    @property
    def storage(self) -> Storage:
        """Where the project's commands read and write (``AUTOMEM_HOME`` is its root)."""
        return Storage.under(self.root)

    def set_params(self, **values) -> None:
        set_params(self.root / "params.yaml", **values)

    def dvc(self, *args: str) -> str:
        done = subprocess.run([str(DVC), *args], cwd=self.root, env=self.env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"dvc {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def command(self, stage: str) -> list[str]:
        """``stage``'s command line as DVC would run it now, parameters substituted (``dvc repro --dry``)."""
        out = self.dvc("repro", "--dry", "--single-item", stage)
        [line] = [line for line in out.splitlines() if line.startswith("> ")]
        return shlex.split(line[2:])


WIN = [{"match": "Phase: LOG", "reply": "<|DONE|>"},
       {"match": "WIN-MARKER", "reply": "<|ACTION|>do<|END|>"},
       {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"}]
"""Scripted game-model rules: ``do`` (which collects on Crafter) only when the PLAN prompt carries
``WIN-MARKER``, so a candidate with it beats the champion on the evaluation seeds."""


def run_stage(project: StageProject, stage: str) -> None:
    """``stage``'s exact command (``StageProject.command``) in this process, in the project's folder,
    with the commands' storage pointed at it; the caller's ``monkeypatch`` undoes both."""
    from automem_dagster import cli

    previous = Path.cwd()
    os.chdir(project.root)
    try:
        command = project.command(stage)
        assert command[0] == "automem", command
        assert cli.main(command[1:]) == 0, f"{stage}: {shlex.join(command)}"
    finally:
        os.chdir(previous)


def win_candidate(project: StageProject):
    """A revision of the champion (v0, so v1 on an empty lineage) that adds ``WIN-MARKER`` to the PLAN prompt."""
    from automem_dagster.scaffold import load_scaffold

    champion = load_scaffold("crafter", 0, project.storage.scaffolds)
    return champion.model_copy(update={"version": 1, "parent": 0,
                                       "plan_prompt": champion.plan_prompt + " WIN-MARKER: use do."})


def register_pending(project: StageProject, candidate) -> None:
    """``candidate`` saved and registered in the project's lineage as pending, as a round's revise stage
    leaves it (``register_candidate``): a round that stopped before its decision."""
    from automem_dagster.loop.structure import register_candidate

    register_candidate(candidate, candidate.parent, None, project.storage, project.root)


def store_into_project(project: StageProject, monkeypatch) -> None:
    """The commands run in this process store into the project."""
    from automem_dagster.commands import shared

    monkeypatch.setattr(shared, "STORAGE", project.storage)


def evaluated_revision(project: StageProject, monkeypatch, episodes: int = 2, max_steps: int = 10) -> None:
    """The structure round up to its decision as the DVC stages leave it: ``outputs/revise`` holding the
    ``win_candidate`` registered in the lineage, pending (as ``propose --register`` leaves it), and the
    ``evaluate_candidate`` stage's command played: the candidate beside the champion. The project's
    endpoints file must serve ``WIN``."""
    from automem_dagster.scaffold import scaffold_yaml

    store_into_project(project, monkeypatch)
    project.set_params(evaluate={"episodes": episodes, "max_steps": max_steps})
    candidate = win_candidate(project)
    register_pending(project, candidate)
    revise = project.root / "outputs" / "revise"
    revise.mkdir(parents=True)
    (revise / "candidate.yaml").write_text(scaffold_yaml(candidate))
    (revise / "revision.json").write_text(json.dumps({"version": 1, "parent_version": 0, "rejected_reason": None}))
    run_stage(project, "evaluate_candidate")
