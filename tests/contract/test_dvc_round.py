"""DVC's round is the loops' round (issue 43): run by the real ``dvc`` on stand-in data, its rollout stage
resumes a candidate an earlier round left pending, and its decide stage decides it in the lineage exactly
as the CLI round's decide step does on the same batches; the ledger it wrote makes the next ``dvc repro``
the next round. Real Crafter episodes, played by a scripted game model."""

import json
import shutil

from builders import endpoints_file
from dvc_stages import WIN, StageProject, register_pending, win_candidate

from automem_dagster.loop.challenger import judge_challenger
from automem_dagster.loop.records import flat_verdict, round_champion_dir
from automem_dagster.loop.seed_blocks import round_seeds
from automem_dagster.loop.storage import Storage
from automem_dagster.loop.structure import load_verdict
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.rollout.summary import load_summary

STRUCTURE = ("rollout", "diagnose", "revise", "evaluate_candidate", "decide")
SAME = ("keep", "inconclusive", "reason", "comparison", "gate", "champion_before", "champion_after", "detectable",
        "identity", "metric", "noise", "scaffold_version", "challenger")
"""What a decision says, less where its batches lie (the CLI decides on the same batches, read from here)."""


def said(record) -> dict:
    """``SAME`` of a decision record, as its file holds it (JSON: tuples read back as lists), less where its
    noise record lies (each project stores its own copy)."""
    same = {k: getattr(record, k) for k in SAME}
    same["noise"] = {k: v for k, v in record.noise.items() if k != "record"}
    return json.loads(json.dumps(same))


def ran(log: str) -> list[str]:
    return [line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage '")]


def test_a_dvc_round_resumes_the_pending_candidate_and_decides_as_the_cli_round(tmp_path, scripted, monkeypatch):
    project = StageProject(tmp_path / "project")
    endpoints_file(project.root / "endpoints.yaml", scripted(WIN), ("game",))
    project.set_params(endpoints="endpoints.yaml", rollout={"episodes": 2, "max_steps": 3},
                       evaluate={"episodes": 2, "max_steps": 10}, gate={"rule": "higher_mean"})
    register_pending(project, win_candidate(project))  # an earlier round stopped before deciding v1
    twin = Storage.under(tmp_path / "cli")  # the same project state, for the CLI round's decide step
    shutil.copytree(project.root / "assets", tmp_path / "cli" / "assets")

    log = project.dvc("repro", "decide")
    assert set(ran(log)) == set(STRUCTURE)
    outputs = project.root / "outputs"
    # The round resumed v1: nothing was played, diagnosed or revised; v1 itself was evaluated.
    assert json.loads((outputs / "rollout" / "resumed.json").read_text()) == {"role": "candidate", "challenger": 1}
    assert not (outputs / "rollout" / "batch.json").exists() and not (outputs / "diagnose" / "diagnosis.json").exists()
    assert json.loads((outputs / "evaluate" / "candidate" / "batch.json").read_text())["scaffold_version"] == 1
    assert project.storage.load_lineage("crafter").next_version() == 2  # no second candidate was registered

    # Decided in the lineage and runs/decisions, as every round decides; the metrics file is that record.
    lineage = project.storage.load_lineage("crafter")
    assert lineage.record(1).decision == "kept" and lineage.champion().version == 1
    record = load_verdict(project.storage, "crafter", 1)
    assert record.keep and record.champion_before == 0 and record.champion_after == 1
    assert json.loads((outputs / "decide" / "structure.json").read_text()) == json.loads(json.dumps(
        flat_verdict(record, ("v1", "v0"))))

    # The CLI round's decision (Dagster's promotion calls judge_challenger) on the same two batches, in the
    # twin project, decides the same.
    # The evaluate stage played the champion twice beside v1 and stored that A/A floor: the twin reads it too.
    assert {p.name for p in (outputs / "evaluate" / "candidate-champion").iterdir()} == \
        {"champion", "champion-replay-v1", "champion.json"}
    assert record.noise["floor"] is not None
    shutil.copytree(project.root / "assets" / "noise", tmp_path / "cli" / "assets" / "noise")
    monkeypatch.chdir(project.root)  # where the stages ran: the batches name their folders from there
    evaluated = outputs / "evaluate"
    batches = [load_summary(side) for side in (evaluated / "candidate", round_champion_dir(evaluated / "candidate-champion"))]
    cli = judge_challenger("candidate", "crafter", 1, tuple(batches), twin, GatePolicy("higher_mean"))
    assert said(cli) == said(record)
    cli_lineage = twin.load_lineage("crafter")
    assert cli_lineage.record(1) == lineage.record(1) and cli_lineage.champion().version == 1

    # The ledger moved, so the round's first stages are stale: the next repro is the next round, which
    # revises the new champion v1 from a fresh block of training seeds (one block per registered version).
    stale = {name.split(":")[-1] for name in json.loads(project.dvc("status", "--json"))}
    assert stale & set(STRUCTURE) == {"rollout", "revise", "evaluate_candidate"}
    project.dvc("repro", "--single-item", "rollout")
    played = json.loads((outputs / "rollout" / "batch.json").read_text())
    assert played["scaffold_version"] == 1 and not (outputs / "rollout" / "resumed.json").exists()
    assert played["seeds"] == round_seeds("structure", "crafter", 2, project.storage) \
        != round_seeds("structure", "crafter", 2, project.storage, block=0)
