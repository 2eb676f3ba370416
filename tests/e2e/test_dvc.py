"""The DVC pipeline (dvc.yaml + params.yaml) run by the real DVC on real Crafter episodes.

The pipeline is copied with the project data into a fresh git repository under a temporary
folder, its ``endpoints`` parameter pointed at a scripted OpenAI-compatible server (game and meta
roles) and a scripted vLLM that loads the specialist at runtime (memory role), and run with ``dvc``
from its own virtual environment (``make dvc-install``: docs/install.md explains why DVC cannot
share the main environment). The stages call the main
environment's ``automem``; the specialist is a real one-step LoRA training on the embedded base.

One module-scoped round (both loops, through both decisions) is reproduced once and pushed to
a local remote; the tests read it, or clone it with ``git clone`` + ``dvc pull`` and change the
clone, so each test stands on its own and the expensive round runs once.
"""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from dvc_stages import BIN, DVC, copy_project, set_params
from dvc_stages import PROJECT_FILES as STAGE_PROJECT_FILES

from automem_dagster.llm.embedded_server import embedded_model_path
from automem_dagster.loop.records import round_champion_dir
from automem_dagster.rollout import episode_id
from automem_dagster.rollout.seeds import training_seeds
from automem_dagster.standins.scripted_server import scripted_server
from automem_dagster.standins.scripted_vllm import scripted_vllm
from automem_dagster.training.registry import SpecialistRegistry

pytestmark = [pytest.mark.integration, pytest.mark.server]

PROJECT_FILES = (*STAGE_PROJECT_FILES, ".gitignore")  # this project is a git repository too
STRUCTURE = ("rollout", "diagnose", "revise", "evaluate_candidate", "decide")
PROFICIENCY = ("training_rollouts", "curate", "finetune", "evaluate_specialist", "decide_specialist")
DECISIONS = ("outputs/decide/structure.json", "outputs/decide/proficiency.json")
NEXT_ROUND = {"rollout", "revise", "evaluate_candidate", "training_rollouts", "finetune", "evaluate_specialist"}
"""The stages that read a ledger the decide stages wrote (loop/dvc_round.py): after a decided round of both
loops, the next ``dvc repro`` is the next round."""

DIAGNOSIS = {"summary": "The agent notes trees but never acts on them.", "findings": [
    {"episode": episode_id("crafter", training_seeds("crafter", 2)[0]), "step": 1, "kind": "stuck",
     "what_happened": "the same action again", "scaffold_cause": "nothing warns it that it is stuck",
     "proposed_change": "warn when the same action repeats"}]}
PATCH = {"signals": {"stuck": {"enabled": True, "repeats": 2}},
         "rationale": "Finding 1: the agent repeats itself; a stuck warning after two repeats tells it so."}
KEEP_ALL = {"judgements": [{"id": i, "keep": True, "reason": "records and reads a resource location"} for i in range(8)]}
LORA = {"reasoning": "a tiny dataset: low rank, one epoch", "settings": {
    "rank": 8, "alpha": 16, "dropout": 0.0, "learning_rate": 0.0005, "epochs": 1, "batch_size": 2,
    "target_modules": ["q_proj", "v_proj"], "max_length": 1024}}
NOTES = [f"<|APPEND|>map_notes.txt|tree seen at {place}\n<|DONE|>" for place in ("north", "east", "south", "west")]
GAME = [{"match": "Results:", "reply": "<|ACTION|>do<|END|>"},
        {"match": "Phase: LOG", "replies": NOTES},
        {"match": "Phase: PLAN", "reply": "<|READ|>map_notes.txt"}]
ROUND_RULES = [{"match": "Diagnose this batch", "reply": json.dumps(DIAGNOSIS)},
               {"match": "Propose one patch", "reply": json.dumps(PATCH)},
               {"match": "review its memory decisions", "reply": json.dumps(KEEP_ALL)},
               {"match": "LoRA fine-tuning", "reply": json.dumps(LORA)}, *GAME]


class Project:
    """A git + DVC repository holding a copy of this checkout's pipeline and project data."""

    def __init__(self, root: Path):
        self.root = root
        self.env = {**os.environ, "AUTOMEM_HOME": str(root), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                    "DVC_NO_ANALYTICS": "1"}

    @classmethod
    def create(cls, root: Path, server, memory=None) -> "Project":
        """A new repository whose endpoints all point at ``server``, with tiny budgets; the specialist
        is served by ``memory`` (a scripted vLLM that loads it at runtime) where given, and trained on
        the embedded base, the folder that stand-in serves."""
        root.mkdir()
        copy_project(PROJECT_FILES, root)
        endpoint = {"base_url": server.base_url, "constrained": "none"}
        config = {"game": {"name": "game", "model": "scripted", **endpoint},
                  "meta": {"name": "meta", "model": "scripted", **endpoint}}
        if memory is not None:
            config["memory"] = {"name": "memory", "server": "vllm", "base_url": memory.base_url, "model": "scripted",
                                "constrained": "none"}
        (root / "endpoints.yaml").write_text(yaml.safe_dump(config))
        p = cls(root)
        # 7 rollout steps: the memory routine first writes at step 5, and curation credits only a write
        # a PLAN read showed (or a read that showed a line), never step 0's read of an empty file; an
        # episode with an achievement puts its other windows below its pace, so 3 examples are kept. No
        # counterfactual replay, so the unmeasured decisions train by request (keep_unmeasured): the pipeline,
        # not the replay, is tested here (tests/contract/test_known_answer_variants.py checks the replay).
        p.set_params(endpoints="endpoints.yaml", rollout={"episodes": 2, "max_steps": 7},
                     evaluate={"episodes": 2, "max_steps": 3},
                     curate={"min_examples": 2, "score_window": 1, "review_batches": 2, "accept_score": 1.0,
                             "replay_decisions": 0, "keep_unmeasured": True},
                     finetune={"max_steps": 1, "base": "embedded"})
        p.git("init", "-q")
        p.git("config", "user.email", "test@example.invalid")
        p.git("config", "user.name", "test")
        p.dvc("init", "-q")
        p.dvc("config", "core.analytics", "false")
        p.dvc("config", "core.check_update", "false")
        p.commit("pipeline")
        return p

    def clone(self, dest: Path) -> "Project":
        """``git clone`` of this repository, then ``dvc pull`` from its default remote."""
        subprocess.run(["git", "clone", "-q", str(self.root), str(dest)], check=True, capture_output=True)
        other = Project(dest)
        other.dvc("pull", "-q")
        return other

    def set_params(self, **values) -> None:
        set_params(self.root / "params.yaml", **values)

    def _run(self, cmd: list[str]) -> str:
        done = subprocess.run(cmd, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{' '.join(cmd[1:])} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def dvc(self, *args: str) -> str:
        return self._run([str(DVC), *args])

    def git(self, *args: str) -> str:
        return self._run(["git", *args])

    def commit(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)

    def changed(self) -> set[str]:
        """Paths git reports as new or modified (untracked folders listed file by file)."""
        return {line[3:] for line in self.git("status", "--porcelain", "--untracked-files=all").splitlines()}

    def json(self, path: str):
        return json.loads((self.root / path).read_text())

    def stale(self) -> set[str]:
        """The stages ``dvc status`` reports as changed."""
        return {name.split(":")[-1] for name in json.loads(self.dvc("status", "--json"))}


def ran(log: str) -> set[str]:
    """The stages a ``dvc repro`` log says it ran."""
    return {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage '")}


def digests(folder: Path) -> dict[str, str]:
    """Every file's hash, less the trainer's checkpoints (.dvcignore keeps them out of the cache)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "checkpoints" not in p.parts}


def decision_metrics(p: Project) -> dict:
    (workspace,) = json.loads(p.dvc("metrics", "show", "--json")).values()  # one revision: the workspace
    return {path: workspace["data"][path]["data"] for path in DECISIONS}


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    """One round of each loop reproduced with ``dvc repro``, committed and pushed to a local remote."""
    if not DVC.exists():
        pytest.fail(f"DVC is not installed at {DVC}: run `make dvc-install` (DVC lives in its own environment)")
    assert (BIN / "automem").exists(), f"no automem in {BIN}: run `make install`"
    tmp = tmp_path_factory.mktemp("dvc")
    (tmp / "rules.json").write_text(json.dumps(ROUND_RULES))
    server = scripted_server(tmp / "rules.json", tmp / "scripted.log").start()
    memory = scripted_vllm(tmp / "rules.json", tmp / "vllm.log", base_model="scripted", max_lora_rank=256,
                           base_root=str(embedded_model_path().parent)).start()
    try:
        p = Project.create(tmp / "project", server, memory)
        log = p.dvc("repro")
        p.dvc("remote", "add", "-d", "local", str(tmp / "remote"))
        p.commit("a reproduced round")
        p.dvc("push", "-q")
        yield p, log
    finally:
        server.stop()
        memory.stop()


def test_dvc_repro_runs_both_rounds_to_their_decisions(reproduced):
    p, log = reproduced
    assert ran(log) == set(STRUCTURE + PROFICIENCY)

    structure, proficiency = (p.json(path) for path in DECISIONS)
    assert p.json("outputs/revise/revision.json")["rejected_reason"] is None
    assert structure["role"] == "candidate" and (structure["challenger"], structure["champion"]) == ("v1", "v0")
    assert proficiency["role"] == "specialist" and proficiency["challenger"] == "v0 + specialist"
    for record in (structure, proficiency):
        assert record["outcome"] in ("kept", "rolled_back", "inconclusive")
        assert record["keep"] == (record["outcome"] == "kept")
        assert record["n"] == 2 and record["ci_low"] <= record["mean_difference"] <= record["ci_high"]
        assert record["reason"].startswith(record["outcome"].replace("_", " "))
    # Each challenger was played beside the champion in its own stage, on the same seeds; the first of them
    # played the champion twice and stored that A/A floor, which both decisions quote.
    candidate_batch = p.json("outputs/evaluate/candidate/batch.json")
    specialist_batch = p.json("outputs/evaluate/specialist/batch.json")
    champions = [p.json(f"{round_champion_dir(p.root / 'outputs' / 'evaluate' / side)}/batch.json")
                 for side in ("candidate-champion", "specialist-champion")]
    assert all(b["seeds"] == candidate_batch["seeds"] == specialist_batch["seeds"] for b in champions)
    assert not any(b["two_model"] for b in champions) and not candidate_batch["two_model"] and specialist_batch["two_model"]
    assert structure["noise_floor"] is not None and proficiency["noise_floor"] is not None
    assert list((p.root / "assets" / "noise" / "crafter").glob("*.json"))  # committed with the round, as the ledgers

    # Both decisions are in the ledgers, as a CLI round records them.
    assert p.json("assets/lineage/crafter.json")["versions"][1]["decision"] == structure["outcome"]
    assert p.json("assets/specialists/crafter.json")["adapters"][0]["decision"] == proficiency["outcome"]
    # DVC sees the records as metrics, the tables as plots, and the changed ledgers make the next round.
    # (`dvc metrics show` leaves out null and list values, e.g. gate_metric under a rule that names none.)
    assert decision_metrics(p) == {path: {k: v for k, v in p.json(path).items() if v is not None and not isinstance(v, list)}
                                   for path in DECISIONS}
    progression = p.json("outputs/decide/structure-progression.json")
    assert [row["agent"] for row in progression] == ["v0", "v1"]
    assert all(r["progression_low"] <= r["progression"] <= r["progression_high"] for r in progression)
    assert {row["metric"] for row in p.json("outputs/decide/proficiency-behaviour.json")} >= {"redundant_write_rate"}
    assert [row["step"] for row in p.json("outputs/finetune-loss/train.json")][-1] == 1
    plots = json.loads(p.dvc("plots", "show", "--json"))
    assert "errors" not in plots and len(plots["data"]) == 5
    assert p.stale() == NEXT_ROUND


def test_an_edit_reruns_exactly_the_stages_that_depend_on_it(reproduced, tmp_path):
    original, _ = reproduced
    p = original.clone(tmp_path / "clone")
    # The endpoints file: every stage that calls a model.
    assert p.stale() == NEXT_ROUND  # the decided round moved the ledgers
    (p.root / "endpoints.yaml").write_text((p.root / "endpoints.yaml").read_text() + "# edited\n")
    assert p.stale() == NEXT_ROUND | {"diagnose", "curate"}  # every stage calling a model
    p.git("checkout", "--", "endpoints.yaml")

    # The lineage starts the round (rollout, training_rollouts), numbers the candidate (revise), names the
    # champion played beside it (evaluate_candidate) and takes the structure decision (decide).
    lineage = p.root / "assets" / "lineage" / "crafter.json"
    lineage.write_text(lineage.read_text().replace('"decision": "baseline"', '"decision": "baseline" '))
    assert p.stale() == NEXT_ROUND | {"decide"}
    p.git("checkout", "--", "assets/lineage/crafter.json")

    # A shorter evaluation makes both evaluations stale (they are already, by the ledgers), nothing upstream.
    p.set_params(evaluate={"episodes": 2, "max_steps": 2})
    assert p.stale() == NEXT_ROUND
    for stage in ("evaluate_candidate", "evaluate_specialist"):
        assert json.loads(p.dvc("status", "--json", stage))[stage][0]["changed deps"]["params.yaml"] == {
            "evaluate": "modified"}


def test_a_fresh_clone_pulls_the_round_and_its_decisions(reproduced, tmp_path):
    original, _ = reproduced
    p = original.clone(tmp_path / "clone")
    assert p.stale() == NEXT_ROUND  # the round's outputs, and its ledgers committed: the next repro is the next round
    assert decision_metrics(p) == decision_metrics(original)
    # The dataset and the adapter came from the remote, byte for byte.
    for folder in ("outputs/curate", "outputs/finetune"):
        assert digests(p.root / folder) == digests(original.root / folder) != {}
    assert (p.root / "outputs" / "finetune" / "adapter.gguf").exists()
    assert not (p.root / "outputs" / "finetune" / "checkpoints").exists()
    assert p.changed() == set()


def test_after_a_kept_specialist_the_next_round_decides_against_the_agent_in_service(reproduced, tmp_path):
    """The adapter the round trained (a1) is in service: the clone's registry records it kept, as a keep
    does. The next ``dvc repro decide_specialist`` plays the training rollouts by the agent in service,
    trains a2, plays it beside the agent in service (the two-model agent with a1) in the same stage, the
    A/A of that new identity measured by playing it twice, and decides a2 in the registry against a1."""
    original, _ = reproduced
    p = original.clone(tmp_path / "clone")
    with SpecialistRegistry.updating("crafter", p.root / "assets" / "specialists") as registry:
        registry.adapters[0].decision, registry.champion = "kept", registry.adapters[0].id
    kept = registry.champion
    p.commit(f"an earlier round kept {kept}")

    log = p.dvc("repro", "decide_specialist")
    assert ran(log) == set(PROFICIENCY)
    assert p.json("outputs/training_rollouts/batch.json")["two_model"]  # played by the agent in service
    registry = SpecialistRegistry.load("crafter", p.root / "assets" / "specialists")
    challenger = registry.adapters[1]
    record = p.json("outputs/decide/proficiency.json")
    assert (record["challenger_id"], record["champion_before"]) == (challenger.id, kept)
    assert record["outcome"] in ("kept", "rolled_back", "inconclusive") and challenger.decision == record["outcome"]
    assert registry.champion == (challenger.id if record["keep"] else kept)
    # The agent in service was played in this round beside a2, twice: no A/A was stored for its identity.
    beside = p.root / "outputs" / "evaluate" / "specialist-champion"
    arms = {arm.name: json.loads((arm / "batch.json").read_text()) for arm in beside.iterdir() if arm.is_dir()}
    assert set(arms) == {"champion", f"champion-replay-specialist-{challenger.id}"}
    assert all(batch["two_model"] for batch in arms.values())
    decision = json.loads((p.root / "runs" / "decisions" / "crafter" / f"specialist-{challenger.id}.json").read_text())
    assert decision["identity"]["champion"]["digest"] == decision["noise"]["identity"]
    assert record["noise_floor"] is not None and decision["noise"]["champion_play"] != \
        "batch reused without a bit-identical A/A replay of its identity, so its score is one draw"
    assert "specialist-champion" in decision["champion_batch"]


def test_a_rejected_revision_is_a_recorded_outcome(tmp_path):
    """The meta-LLM's patch changes only wording: revise records the rejection, evaluate_candidate
    plays nothing, and decide writes a rejected record; every stage succeeds."""
    if not DVC.exists():
        pytest.fail(f"DVC is not installed at {DVC}: run `make dvc-install` (DVC lives in its own environment)")
    wording = {"rationale": "Finding 1: say it more firmly.", "log_prompt": "Record what happened, briefly."}
    rules = [{"match": "Diagnose this batch", "reply": json.dumps(DIAGNOSIS)},
             {"match": "Propose one patch", "reply": json.dumps(wording)}, *GAME]
    (tmp_path / "rules.json").write_text(json.dumps(rules))
    server = scripted_server(tmp_path / "rules.json", tmp_path / "scripted.log").start()
    try:
        p = Project.create(tmp_path / "project", server)
        log = p.dvc("repro", "decide")
    finally:
        server.stop()
    assert ran(log) == set(STRUCTURE)
    assert p.json("outputs/revise/revision.json")["rejected_reason"]
    assert (p.root / "outputs" / "evaluate" / "candidate" / "rejected.json").exists()
    record = p.json("outputs/decide/structure.json")
    assert record["outcome"] == "rejected" and record["keep"] == 0 and record["mean_difference"] is None
    assert p.json("outputs/decide/structure-progression.json") == []  # nothing was played, the champion neither
    # Nothing was registered or decided, so the ledger is as it was: no stage is left to rerun.
    assert "up to date" in p.dvc("status", "decide")
