"""``automem adopt``: a DVC round's kept decision taken into the scaffolds and the lineage by the rounds'
own code, refused when it is not kept, stale or unreadable, and idempotent. The round is played by the
pipeline's own stage commands on real Crafter with a scripted game model (tests/dvc_stages.py)."""

import json
from pathlib import Path

import pytest
import yaml
from builders import endpoints_file
from dvc_stages import REPO, WIN, StageProject, evaluated_revision, run_stage

from automem_dagster import cli
from automem_dagster.loop import seed_blocks
from automem_dagster.loop.adoption import PipelineRound
from automem_dagster.loop.structure import load_decision, register_candidate
from automem_dagster.scaffold import content_hash, load_scaffold
from automem_dagster.training.registry import SpecialistRegistry


@pytest.fixture
def decided(tmp_path, scripted, monkeypatch):
    """A project whose structure round was decided by the decide stage's command: v1 beats v0 on 2 seeds,
    kept by AutoMem's rule with no noise floor measured (the default gate calls 2 seeds inconclusive)."""
    project = StageProject(tmp_path / "project")
    endpoints_file(project.root / "endpoints.yaml", scripted(WIN), ("game",))
    project.set_params(endpoints="endpoints.yaml", gate={"rule": "higher_mean"})
    evaluated_revision(project, monkeypatch)
    run_stage(project, "decide")
    monkeypatch.chdir(project.root)
    return project


def adopt(record: str = "outputs/decide/structure.json") -> int:
    return cli.main(["adopt", "--decision", record])


def test_a_kept_candidate_becomes_the_champion_as_a_cli_round_would_make_it(decided, capsys):
    store = decided.storage
    assert json.loads((decided.root / "outputs/decide/structure.json").read_text())["outcome"] == "kept"
    assert seed_blocks.next_block("structure", "crafter", store) == 0
    assert adopt() == 0
    assert "adopted crafter v1" in capsys.readouterr().out
    lineage = store.load_lineage("crafter")
    assert lineage.champion().version == 1 and lineage.record(1).decision == "kept" and lineage.record(1).parent == 0
    saved = load_scaffold("crafter", 1, store.scaffolds)
    assert content_hash(saved) == lineage.record(1).content_hash and "WIN-MARKER" in saved.plan_prompt
    decision = load_decision(store, "crafter", 1)  # the CLI round's decision file, from the same batches
    assert decision.keep and decision.champion_after == 1 and decision.gate["rule"] == "higher_mean"
    assert decision.challenger_batch == "outputs/evaluate/candidate"  # as the pipeline names it
    # The next DVC round (its rollout depends on the lineage) plays a fresh block.
    assert seed_blocks.next_block("structure", "crafter", store) == 1

    # Again: nothing changes.
    before = (store.lineage / "crafter.json").read_bytes()
    assert adopt() == 0
    assert "adopted already" in capsys.readouterr().out
    assert (store.lineage / "crafter.json").read_bytes() == before


def test_an_inconclusive_decision_is_refused_and_nothing_is_written(decided, capsys):
    decided.set_params(gate={"rule": "significant", "min_seeds": 5})
    run_stage(decided, "decide")
    capsys.readouterr()
    before = (decided.storage.lineage / "crafter.json").read_bytes()
    assert adopt() == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "outputs/decide/structure.json says inconclusive" in said and "Only a kept candidate is adopted" in said
    assert (decided.storage.lineage / "crafter.json").read_bytes() == before
    assert not (decided.storage.scaffolds / "crafter" / "v1.yaml").exists()


def test_a_decision_the_lineage_moved_past_is_refused(decided, capsys):
    """Another version registered meanwhile took the candidate's number: its round is stale."""
    store = decided.storage
    other = load_scaffold("crafter", 0, store.scaffolds).model_copy(update={"version": 1, "parent": 0, "log_prompt": "x"})
    register_candidate(other, 0, None, store, decided.root)
    before = (store.lineage / "crafter.json").read_bytes()
    assert adopt() == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "is stale" in said and "crafter v1" in said and "rerun `dvc repro`" in said
    assert (store.lineage / "crafter.json").read_bytes() == before


def test_a_record_that_does_not_describe_the_files_beside_it_is_refused(decided, capsys):
    record_path = decided.root / "outputs/decide/structure.json"
    record = json.loads(record_path.read_text())
    before = (decided.storage.lineage / "crafter.json").read_bytes()
    record_path.write_text(json.dumps({**record, "challenger_identity": "another batch"}))
    assert adopt() == 2
    assert "is stale: it was not decided on the batch now in" in " ".join(capsys.readouterr().err.split())
    record_path.write_text("{not json")
    assert adopt() == 2
    assert "outputs/decide/structure.json: no readable decision record" in " ".join(capsys.readouterr().err.split())
    record_path.write_text(json.dumps(record))
    (decided.root / "outputs/revise/candidate.yaml").unlink()
    assert adopt() == 2
    assert "outputs/revise/candidate.yaml: no readable candidate" in " ".join(capsys.readouterr().err.split())
    assert (decided.storage.lineage / "crafter.json").read_bytes() == before


MEMORY_GAME = [{"match": "Memory consulted:", "reply": "<|ACTION|>do<|END|>"},
               {"match": "Phase: LOG", "reply": "<|DONE|>"},
               {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"}]
"""The game model acts (``do``) only on what a memory consultation showed it: the one-model champion,
which never writes, idles; the two-model agent, whose specialist notes and reads, collects."""
SPECIALIST = [{"match": "Phase: LOG", "reply": "<|APPEND|>map_notes.txt|tree seen nearby\n<|DONE|>"},
              {"match": "Phase: PLAN", "reply": "<|READ|>map_notes.txt"}]


def exported_stand_in_adapter(folder, base: str) -> None:
    """What ``automem finetune --out`` leaves, with stand-in weights the scripted vLLM loads by name."""
    from automem_dagster.meta.lora_config import LoraChoice
    from automem_dagster.training.settings import default_settings

    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text(json.dumps({"r": 8, "base_model_name_or_path": base}))
    (folder / "adapter" / "adapter_model.safetensors").write_bytes(b"stand-in weights")
    (folder / "training.json").write_text(json.dumps({"fingerprint": "stand-in-run", "dataset": "outputs/curate"}))
    settings = default_settings(576)
    LoraChoice(settings, "given", "a stand-in adapter", settings).save(folder / "lora_config.json")


def test_a_kept_specialist_is_registered_and_put_in_service(tmp_path, scripted, vllm_server, monkeypatch, capsys):
    project = StageProject(tmp_path / "project")
    memory = vllm_server(SPECIALIST, base_model="scripted", base_root="stand-in-base")
    endpoints_file(project.root / "endpoints.yaml", scripted(MEMORY_GAME), ("game",), memory=memory)
    project.set_params(endpoints="endpoints.yaml", evaluate={"episodes": 2, "max_steps": 10},
                       gate={"rule": "higher_mean"})
    exported_stand_in_adapter(project.root / "outputs" / "finetune", "stand-in-base")
    evaluated_revision(project, monkeypatch)  # sets the commands' storage and tracking to the project
    for stage in ("evaluate_specialist", "decide_specialist"):
        run_stage(project, stage)
    monkeypatch.chdir(project.root)
    record = "outputs/decide/proficiency.json"
    assert json.loads((project.root / record).read_text())["outcome"] == "kept"
    capsys.readouterr()
    assert adopt(record) == 0
    assert "adopted adapter a1 as the crafter specialist" in capsys.readouterr().out
    registry = SpecialistRegistry.load("crafter", project.storage.specialists)
    [adapter] = registry.adapters
    assert registry.champion == "a1" and adapter.decision == "kept" and adapter.scaffold_version == 0
    assert adapter.adapter_dir == str(project.storage.runs / "adapters" / "crafter" / "a1" / "adapter")
    assert (project.storage.runs / "decisions" / "crafter" / "specialist-a1.json").exists()
    assert adopt(record) == 0 and "adopted already" in capsys.readouterr().out
    assert len(SpecialistRegistry.load("crafter", project.storage.specialists).adapters) == 1


def test_adopt_reads_the_folders_the_pipeline_writes():
    """``PipelineRound`` finds a decision's batches, candidate and adapter where dvc.yaml's stages put them."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]

    def option(stage: str, name: str) -> str:
        words = stages[stage]["cmd"].split()
        return words[words.index(name) + 1]

    for stage in ("decide", "decide_specialist"):
        done = PipelineRound(Path(option(stage, "--record")), {"role": option(stage, "--role")},
                             Path(option(stage, "--record")).parent.parent)
        assert (option(stage, "--challenger"), option(stage, "--champion")) == (str(done.challenger_dir),
                                                                              str(done.champion_dir))
        assert done.outputs == Path("outputs")
    assert (option("evaluate_candidate", "--candidate"), option("diagnose", "--out"),
            option("evaluate_specialist", "--specialist")) == ("outputs/revise", "outputs/diagnose", "outputs/finetune")
