"""``dvc.yaml`` is generated from the loops' plans (``automem dvc-yaml``, ``loop/dvc_plan.py``): the committed
file is exactly that output, and the generator refuses a pipeline that disagrees with the plans."""

from dataclasses import replace
from pathlib import Path

import pytest

import automem_dagster
from automem_dagster import cli
from automem_dagster.loop import dvc_plan

REPO = Path(automem_dagster.__file__).parents[1]
"""The checkout (tests run with a scratch project home, so not ``paths.PROJECT_ROOT``)."""


def test_the_committed_dvc_yaml_is_what_automem_dvc_yaml_writes(tmp_path):
    out = tmp_path / "dvc.yaml"
    assert cli.main(["dvc-yaml", "--out", str(out)]) == 0
    assert out.read_text() == (REPO / "dvc.yaml").read_text(), "dvc.yaml was edited by hand: run automem dvc-yaml --out dvc.yaml"


def test_stages_follow_the_plans_order():
    assert dvc_plan.stage_order() == ["rollout", "diagnose", "revise", "evaluate_candidate", "decide",
                                      "training_rollouts", "curate", "finetune", "evaluate_specialist",
                                      "decide_specialist"]


def test_a_stage_no_step_names_is_refused(monkeypatch):
    monkeypatch.setitem(dvc_plan.STAGES, "lint", dvc_plan.DvcStage("an extra stage", "automem plan"))
    with pytest.raises(ValueError, match=r"definitions no step names \['lint'\]"):
        dvc_plan.stage_order()


def test_a_stage_reading_an_output_no_earlier_stage_writes_is_refused(monkeypatch):
    diagnose = dvc_plan.STAGES["diagnose"]
    monkeypatch.setitem(dvc_plan.STAGES, "diagnose", replace(diagnose, deps=(*diagnose.deps, "outputs/curate")))
    with pytest.raises(ValueError, match=r"stage diagnose reads \['outputs/curate'\]"):
        dvc_plan.stage_order()
