"""The gate of both loops: a challenger (a scaffold candidate or a specialist adapter) against the
champion on the paired evaluation seeds, and the decision files both loops write."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TypeVar

from automem_dagster.atomic import write_json_atomic
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.storage import Storage, slug
from automem_dagster.metrics.paired import GateDecision, GatePolicy, compare_paired, decide
from automem_dagster.rollout import BatchSummary
from automem_dagster.rollout.trajectory import read_manifest

Record = TypeVar("Record")


def per_seed(summary: BatchSummary) -> dict[int, float]:
    return {e.seed: e.progression for e in summary.episodes}


def decide_paired(challenger: BatchSummary, champion: BatchSummary, role: str, gate: GatePolicy | None = None) -> GateDecision:
    """The gate of both loops: keep ``challenger`` (a ``role``: candidate or specialist) only if it
    beats the champion on the paired evaluation seeds under ``gate``. Refuses batches that do not cover
    the same seeds (an interrupted evaluation), since an unpaired comparison would judge different games."""
    mine, champ = per_seed(challenger), per_seed(champion)
    if set(mine) != set(champ):
        raise RoundError(f"{role} seeds {sorted(mine)} and champion seeds {sorted(champ)} differ: "
                         "rerun the evaluation to finish both batches")
    return decide(compare_paired(mine, champ), gate)


def sampling_of(batch: BatchSummary) -> dict:
    """How the batch's requests were seeded, as its batch.json recorded it (``agent.sampling``)."""
    recorded = read_manifest(Path(batch.out_dir)).get("sampling_seeds")
    return recorded or {"note": "not recorded: the batch was played before requests carried seeds"}


def decision_evidence(decision: GateDecision, challenger: BatchSummary, champion: BatchSummary, role: str) -> dict:
    """What a decision record keeps beside the comparison: the gate policy it was taken under and
    whether each side's endpoints honour sampling seeds (so whether a rerun would replay it)."""
    return {"gate": decision.policy.as_dict(),
            "sampling": {role: sampling_of(challenger), "champion": sampling_of(champion)}}


def decision_path(storage: Storage, game: str, name: str) -> Path:
    """``runs/decisions/<game>/<name>.json``: ``v<N>`` for a candidate, ``specialist-<id>`` for an adapter."""
    return storage.runs / "decisions" / slug(game) / f"{name}.json"


def write_decision_record(storage: Storage, game: str, name: str, record) -> None:
    """Write a decision record (a dataclass) where ``load_decision_record`` finds it."""
    write_json_atomic(decision_path(storage, game, name), asdict(record))


def load_decision_record(storage: Storage, game: str, name: str, kind: type[Record]) -> Record | None:
    """The decision record ``name`` of ``game`` as ``kind``; None when it was not taken yet."""
    path = decision_path(storage, game, name)
    return kind(**json.loads(path.read_text())) if path.exists() else None
