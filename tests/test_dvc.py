"""The DVC pipeline (dvc.yaml + params.yaml) run by the real DVC on real Crafter episodes.

Each test copies the pipeline and the project data into a fresh git repository under a
temporary folder, points the ``endpoints`` parameter at a scripted OpenAI-compatible server,
and runs ``dvc`` from its own virtual environment (``make dvc-install``: SETUP.md explains why
DVC cannot share the main environment). The stages call the main environment's ``automem``.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from automem_dagster.rollout import episode_id
from automem_dagster.rollout.seeds import training_seeds

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
DVC = REPO / ".venv-dvc" / "bin" / "dvc"
BIN = Path(sys.executable).parent  # the environment running the tests, which holds `automem`
GAME_RULES = [
    {"match": "Phase: LOG", "reply": "<|DONE|>"},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"},
]
EVALUATION_OUTS = ["batch.json", "summary.json", "trajectories", "memory"]  # cached; metrics.json lives in git
STRUCTURE_STAGES = ("rollout", "diagnose", "revise", "evaluate")


class Project:
    """A throwaway git + DVC repository holding this checkout's pipeline and project data."""

    def __init__(self, root: Path, server):
        self.root = root
        self.env = {**os.environ, "AUTOMEM_HOME": str(root), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                    "DVC_NO_ANALYTICS": "1"}
        root.mkdir()
        for name in ("dvc.yaml", "params.yaml", ".gitignore"):
            shutil.copy2(REPO / name, root / name)
        shutil.copytree(REPO / "assets", root / "assets")
        endpoint = {"base_url": server.base_url, "model": "scripted", "constrained": "none"}
        (root / "endpoints.yaml").write_text(yaml.safe_dump({"game": {"name": "game", **endpoint},
                                                             "meta": {"name": "meta", **endpoint}}))
        params = yaml.safe_load((root / "params.yaml").read_text())
        params["endpoints"] = "endpoints.yaml"
        params["rollout"] = {"episodes": 2, "max_steps": 3}
        params["evaluate"] = {"episodes": 2, "max_steps": 3}
        (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        self.git("init", "-q")
        self.git("config", "user.email", "test@example.invalid")
        self.git("config", "user.name", "test")
        self.dvc("init", "-q")
        self.dvc("config", "core.analytics", "false")
        self.dvc("config", "core.check_update", "false")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "pipeline")

    def _run(self, cmd: list[str]) -> str:
        done = subprocess.run(cmd, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(cmd[1:])} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def dvc(self, *args: str) -> str:
        return self._run([str(DVC), *args])

    def git(self, *args: str) -> str:
        return self._run(["git", *args])

    def changed(self) -> set[str]:
        """Paths git reports as new or modified (untracked folders listed file by file)."""
        return {line[3:] for line in self.git("status", "--porcelain", "--untracked-files=all").splitlines()}


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def project(tmp_path):
    if not DVC.exists():
        pytest.fail(f"DVC is not installed at {DVC}: run `make dvc-install` (DVC lives in its own environment)")
    assert (BIN / "automem").exists(), f"no automem in {BIN}: run `make install`"
    return lambda server: Project(tmp_path / "project", server)


def test_evaluate_stage_reproduces_skips_when_unchanged_and_round_trips_through_a_remote(project, scripted, tmp_path):
    p = project(scripted(GAME_RULES))
    log = p.dvc("repro", "evaluate")
    assert "Running stage 'evaluate'" in log and "rollout" not in log

    out = p.root / "outputs" / "evaluate"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["episodes"] == 2 and 0.0 <= metrics["progression_mean"] <= 1.0
    (workspace,) = json.loads(p.dvc("metrics", "show", "--json")).values()  # one revision: the workspace
    assert workspace["data"]["outputs/evaluate/metrics.json"]["data"]["progression_mean"] == metrics["progression_mean"]
    assert len(list((out / "trajectories").iterdir())) == 2
    # The cached outputs are git-ignored; what is left for git is the lock and the metrics.
    assert p.changed() == {"dvc.lock", "outputs/evaluate/metrics.json"}

    lock = (p.root / "dvc.lock").read_text()
    again = p.dvc("repro", "evaluate")
    assert "Running stage" not in again and "didn't change, skipping" in again
    assert (p.root / "dvc.lock").read_text() == lock

    before = digests(out)
    p.dvc("remote", "add", "-d", "r", str(tmp_path / "remote"))
    p.dvc("push", "evaluate")
    for name in EVALUATION_OUTS:
        target = out / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    shutil.rmtree(p.root / ".dvc" / "cache")
    p.dvc("pull", "evaluate")
    assert digests(out) == before
    assert "up to date" in p.dvc("status", "evaluate")


def test_the_whole_pipeline_runs_rollout_diagnosis_revision_and_evaluation(project, scripted):
    diagnosis = {"summary": "The agent idles on every step and never interacts.", "findings": [
        {"episode": episode_id("crafter", training_seeds("crafter", 2)[0]), "step": 1, "kind": "stuck",
         "what_happened": "noop again", "scaffold_cause": "nothing warns it that it is stuck",
         "proposed_change": "warn when the same action repeats"}]}
    patch = {"signals": {"stuck": {"enabled": True, "repeats": 2}},
             "rationale": "Finding 1: the agent repeats noop; a stuck warning after two repeats tells it so."}
    p = project(scripted([{"match": "Diagnose this batch", "reply": json.dumps(diagnosis)},
                          {"match": "Propose one patch", "reply": json.dumps(patch)}, *GAME_RULES]))
    log = p.dvc("repro", *STRUCTURE_STAGES)
    for stage in STRUCTURE_STAGES:
        assert f"Running stage '{stage}'" in log

    outputs = p.root / "outputs"
    assert sorted(json.loads((outputs / "rollout" / "batch.json").read_text())["seeds"]) == \
        sorted(training_seeds("crafter", 2))
    assert len(json.loads((outputs / "diagnose" / "diagnosis.json").read_text())["findings"]) == 1
    revision = json.loads((outputs / "revise" / "revision.json").read_text())
    assert revision["rejected_reason"] is None and revision["parent_version"] == 0
    candidate = yaml.safe_load((outputs / "revise" / "candidate.yaml").read_text())
    assert candidate["signals"]["stuck"] == {"enabled": True, "repeats": 2}
    assert "stuck.enabled False -> True" in (outputs / "revise" / "diff.md").read_text()
    assert "progression_mean" in json.loads((outputs / "evaluate" / "metrics.json").read_text())

    lock = yaml.safe_load((p.root / "dvc.lock").read_text())
    assert set(lock["stages"]) == set(STRUCTURE_STAGES)
    assert p.changed() == {"dvc.lock", "outputs/evaluate/metrics.json"}
    assert "up to date" in p.dvc("status", *STRUCTURE_STAGES)
    # Every stage depends on the pinned scaffold file: editing it makes all of them stale.
    scaffold = p.root / "assets" / "scaffolds" / "crafter" / "v0.yaml"
    scaffold.write_text(scaffold.read_text() + "# edited\n")
    assert set(STRUCTURE_STAGES) <= set(json.loads(p.dvc("status", "--json")))


def test_the_proficiency_stages_curate_and_train_a_specialist(project, scripted):
    """rollout -> curate -> finetune with a game model that writes notes and reads them back:
    a real (two-step) LoRA training on the embedded base, exported as GGUF, its figures as metrics."""
    notes = [f"<|APPEND|>map_notes.txt|tree seen at {place}\n<|DONE|>" for place in ("north", "east", "south", "west")]
    keep_all = {"verdicts": [{"id": i, "keep": True, "reason": "records and reads a resource location"} for i in range(8)]}
    lora = {"reasoning": "a tiny dataset: low rank, one epoch", "settings": {
        "rank": 8, "alpha": 16, "dropout": 0.0, "learning_rate": 0.0005, "epochs": 1, "batch_size": 2,
        "target_modules": ["q_proj", "v_proj"], "max_length": 1024}}
    p = project(scripted([
        {"match": "review its memory decisions", "reply": json.dumps(keep_all)},
        {"match": "LoRA fine-tuning", "reply": json.dumps(lora)},
        {"match": "Results:", "reply": "<|ACTION|>do<|END|>"},
        {"match": "Phase: LOG", "replies": notes},
        {"match": "Phase: PLAN", "reply": "<|READ|>map_notes.txt"},
    ]))
    params = yaml.safe_load((p.root / "params.yaml").read_text())
    params["curate"] = {"min_examples": 4, "horizon": 3, "review_batches": 2}
    params["finetune"] = {"max_steps": 2}
    (p.root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    log = p.dvc("repro", "finetune")
    for stage in ("rollout", "curate", "finetune"):
        assert f"Running stage '{stage}'" in log

    outputs = p.root / "outputs"
    stats = json.loads((outputs / "curate" / "stats.json").read_text())
    assert stats["examples"] >= 4 and stats["verdicts"].get("reviewed_kept", 0) > 0
    assert json.loads((outputs / "finetune" / "lora_config.json").read_text())["source"] == "meta-LLM"
    assert (outputs / "finetune" / "adapter.gguf").stat().st_size > 0
    metrics = json.loads(p.dvc("metrics", "show", "--json"))
    figures = next(iter(metrics.values()))["data"]["outputs/finetune-metrics.json"]["data"]
    assert figures["steps"] == 2 and figures["peak_rss_mb"] > 0
