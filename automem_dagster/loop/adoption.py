"""Adopting a kept DVC decision: what the CLI's and Dagster's rounds do after their gate, done after
the pipeline's.

The DVC stages never write the lineage or the specialist registry (inputs of their own stages), so
``dvc repro`` ends with a flat decision record (``loop/records.py``). ``adopt_decision`` takes a kept
one into the project through the rounds' own code: a candidate is saved as the next scaffold version
and recorded pending (``register_candidate``, as ``revise_stage`` does), then decided and promoted
by ``decide_stage``; an adapter is copied out of the pipeline's outputs, registered
(``register_adapter``, as ``train_stage`` does) and decided by ``decide_specialist_stage``. Those
re-apply the gate to the record's own batches under the record's own policy, so the lineage and the
registry say exactly what a CLI round would have. Refused, with nothing written, when the record is
not "kept", when it does not describe the files beside it, or when the project moved on since (the
champion changed, another version was registered). Re-running it after a success changes nothing;
after a failure halfway it finishes the decision.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from automem_dagster.games import game_family
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.gate import decide_paired, identity_quote
from automem_dagster.loop.proficiency import (
    adapter_dir,
    decide_specialist_stage,
    exported_adapter,
    register_adapter,
    registry,
)
from automem_dagster.loop.records import read_evaluation, recorded_gate
from automem_dagster.loop.storage import Storage
from automem_dagster.loop.structure import decide_stage, register_candidate
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.rollout import BatchSummary
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold import Scaffold, ScaffoldError, content_hash, load_scaffold_file


@dataclass(frozen=True)
class PipelineRound:
    """A round as dvc.yaml's stages leave it under ``outputs``: the decision ``record`` and the
    folders its decide stage compared (``challenger``, ``champion``), with what made the challenger."""

    record_path: Path
    record: dict
    outputs: Path

    @classmethod
    def read(cls, record_path: Path) -> PipelineRound:
        path = Path(record_path)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise RoundError(f"{path}: no readable decision record ({exc}): run `dvc repro` to its decide stage "
                             "(or `dvc checkout` it) first") from exc
        if not isinstance(record, dict) or record.get("role") not in ("candidate", "specialist"):
            raise RoundError(f"{path} is not a decision record of `automem decide` (no role candidate or specialist): "
                             "pass outputs/decide/structure.json or outputs/decide/proficiency.json")
        return cls(path, record, path.parent.parent)

    @property
    def role(self) -> str:
        return self.record["role"]

    @property
    def challenger_dir(self) -> Path:
        return self.outputs / "evaluate" / self.role

    @property
    def champion_dir(self) -> Path:
        return self.outputs / "evaluate" / "champion"

    def kept_batches(self) -> tuple[BatchSummary, BatchSummary, GatePolicy]:
        """The challenger's and the champion's batches and the record's gate, after checking that the
        record is kept, was decided on these batches, and that they still give "kept" under that gate."""
        outcome = self.record.get("outcome")
        if outcome != "kept":
            raise RoundError(f"{self.record_path} says {outcome}: {self.record.get('reason')}. Only a kept "
                             f"{self.role} is adopted; nothing changed (run another round)")
        challenger, champion = read_evaluation(self.challenger_dir), read_evaluation(self.champion_dir)
        if challenger is None or champion is None:
            raise RoundError(f"{self.record_path} is stale: {self.challenger_dir} or {self.champion_dir} holds no "
                             "evaluated batch now; rerun `dvc repro`")
        for side, batch in (("challenger", challenger), ("champion", champion)):
            if identity_quote(batch)["digest"] != self.record.get(f"{side}_identity"):
                raise RoundError(f"{self.record_path} is stale: it was not decided on the batch now in {batch.out_dir} "
                                 "(its identity differs); rerun `dvc repro` so the decision and the batches agree")
        gate = recorded_gate(self.record)
        if not decide_paired(challenger, champion, self.role, gate).keep:
            raise RoundError(f"{self.record_path} is stale: its batches do not pass its {gate.rule} gate again; "
                             "rerun `dvc repro`")
        return challenger, champion, gate


def adopt_decision(record_path: Path, storage: Storage) -> str:
    """Adopt the kept decision in ``record_path`` (see the module docstring); returns what was done."""
    done = PipelineRound.read(record_path)
    return adopt_candidate(done, storage) if done.role == "candidate" else adopt_specialist(done, storage)


def adopt_candidate(done: PipelineRound, storage: Storage) -> str:
    """Save the kept candidate as the next version, record it, and promote it through ``decide_stage``."""
    candidate_file = done.outputs / "revise" / "candidate.yaml"
    try:
        candidate = load_scaffold_file(candidate_file)
    except (OSError, ScaffoldError) as exc:
        raise RoundError(f"{candidate_file}: no readable candidate ({exc}): rerun `dvc repro` (or `dvc checkout`)") from exc
    challenger, champion, gate = done.kept_batches()
    if identity_quote(challenger)["scaffold_hash"] != content_hash(candidate):
        raise RoundError(f"{done.record_path} is stale: {done.challenger_dir} was not played with {candidate_file}; "
                         "rerun `dvc repro`")
    lineage = storage.load_lineage(candidate.game)
    known = {r.version: r for r in lineage.versions}.get(candidate.version)
    if known is not None and known.content_hash == content_hash(candidate) and known.decision == "kept":
        return f"{candidate.game} v{candidate.version} was adopted already (champion v{lineage.champion().version})"
    if known is None:
        stale_lineage(done, candidate, lineage.champion().version, lineage.next_version())
        diagnosis = done.outputs / "diagnose"
        register_candidate(candidate, candidate.parent, diagnosis.resolve() if diagnosis.exists() else None, storage,
                           candidate_file)
    elif known.content_hash != content_hash(candidate) or known.decision is not None:
        raise RoundError(f"{done.record_path} is stale: the lineage already holds {candidate.game} v{candidate.version} "
                         f"({known.decision or 'pending'}, another scaffold); rerun `dvc repro` to revise the current "
                         "champion")
    decision = decide_stage(challenger.game, candidate.version, challenger, champion, storage, gate)
    return (f"adopted {candidate.game} v{candidate.version}: {decision.reason}. Rerun the command in "
            f"params.yaml's header with --scaffold v{candidate.version} for the next round, and commit assets/ (the "
            "scaffold file and the lineage)")


def stale_lineage(done: PipelineRound, candidate: Scaffold, champion: int, next_version: int) -> None:
    """Refuse a candidate of another champion, or one whose number another version took meanwhile."""
    if champion != candidate.parent or next_version != candidate.version:
        raise RoundError(f"{done.record_path} is stale: the lineage moved on since this round revised v{candidate.parent} "
                         f"into v{candidate.version} (the champion is v{champion}, the next version v{next_version}); "
                         "rerun the command in params.yaml's header with --scaffold v<champion>, then `dvc repro`")


def adopt_specialist(done: PipelineRound, storage: Storage) -> str:
    """Copy the kept adapter out of the outputs, register it and make it the specialist through
    ``decide_specialist_stage``."""
    specialist, champion, gate = done.kept_batches()
    version = read_manifest(Path(specialist.out_dir))["scaffold_version"]
    exported = exported_adapter(done.outputs / "finetune", version)
    family = game_family(specialist.game)
    current = storage.load_lineage(family).champion().version
    reg = registry(storage, family)
    known = next((a for a in reg.adapters if a.dataset == exported.dataset and a.scaffold_version == version), None)
    if known is not None and known.decision == "kept":
        return f"adapter {known.id} was adopted already (the {family} specialist is {reg.champion})"
    if known is not None and known.decision is not None:
        raise RoundError(f"{done.record_path} is stale: adapter {known.id}, trained the same way, was {known.decision}")
    if current != version:
        raise RoundError(f"{done.record_path} is stale: the specialist was trained and evaluated for v{version}, but "
                         f"the champion is now v{current}; rerun the command in params.yaml's header with --scaffold "
                         f"v{current}, then `dvc repro`")
    if known is None:
        folder = adapter_dir(storage, specialist.game, reg.next_id())
        shutil.copytree(done.outputs / "finetune", folder, dirs_exist_ok=True)
        known = exported_adapter(folder, version)
        register_adapter(storage, family, known)
    decision = decide_specialist_stage(specialist.game, known.id, specialist, champion, storage, gate)
    return f"adopted adapter {known.id} as the {family} specialist: {decision.reason}"
