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
from automem_dagster.rollout.identity import differences, summarize_fields
from automem_dagster.rollout.trajectory import read_manifest

Record = TypeVar("Record")


def per_seed(summary: BatchSummary) -> dict[int, float]:
    return {e.seed: e.progression for e in summary.episodes}


TESTED = {"candidate": ("scaffold_hash",), "specialist": ("roles.memory",)}
"""What each round tests, as identity fields (``rollout.identity``): a structure round's candidate
differs from its champion in the scaffold alone, a proficiency round's specialist in its memory
role (the adapter serving it); any other difference would be credited to the challenger."""


def identity_of(batch: BatchSummary) -> dict | None:
    """The identity batch.json recorded (``rollout.identity``); None for a batch from before identities."""
    return read_manifest(Path(batch.out_dir)).get("identity")


def pairing_differences(challenger: BatchSummary, champion: BatchSummary, role: str) -> list[str]:
    """The identity fields in which the two batches differ beyond what a ``role`` round tests;
    raises ``RoundError`` when either batch has no identity (it is unknown what played it)."""
    mine, champ = identity_of(challenger), identity_of(champion)
    for name, batch, identity in ((role, challenger, mine), ("champion", champion, champ)):
        if identity is None:
            raise RoundError(f"the {name} batch {batch.out_dir} records no identity (it was played before batches "
                             "recorded what played them), so nothing says which model played it: evaluate it again")
    tested = TESTED[role]
    return [f for f in differences(mine, champ)
            if f not in ("seeds", "digest") and not any(f == t or f.startswith(t + ".") for t in tested)]


def decide_paired(challenger: BatchSummary, champion: BatchSummary, role: str, gate: GatePolicy | None = None) -> GateDecision:
    """The gate of both loops: keep ``challenger`` (a ``role``: candidate or specialist) only if it
    beats the champion on the paired evaluation seeds under ``gate``. Refuses batches that do not cover
    the same seeds (an interrupted evaluation), since an unpaired comparison would judge different games,
    and batches whose identities differ in more than the round tests (``pairing_differences``)."""
    mine, champ = per_seed(challenger), per_seed(champion)
    if set(mine) != set(champ):
        raise RoundError(f"{role} seeds {sorted(mine)} and champion seeds {sorted(champ)} differ: "
                         "rerun the evaluation to finish both batches")
    unlike = pairing_differences(challenger, champion, role)
    if unlike:
        raise RoundError(f"the {role} and champion batches were played with different {summarize_fields(unlike)}: "
                         f"a {role} round may change only {' and '.join(TESTED[role])}, so nothing is decided; "
                         f"evaluate both with the same endpoints and game packages ({challenger.out_dir}, "
                         f"{champion.out_dir})")
    return decide(compare_paired(mine, champ), gate)


def sampling_of(batch: BatchSummary) -> dict:
    """How the batch's requests were seeded, as its batch.json recorded it (``agent.sampling``)."""
    recorded = read_manifest(Path(batch.out_dir)).get("sampling_seeds")
    return recorded or {"note": "not recorded: the batch was played before requests carried seeds"}


def decision_evidence(decision: GateDecision, challenger: BatchSummary, champion: BatchSummary, role: str) -> dict:
    """What a decision record keeps beside the comparison: the gate policy it was taken under and
    whether each side's endpoints honour sampling seeds (so whether a rerun would replay it)."""
    return {"gate": decision.policy.as_dict(),
            "sampling": {role: sampling_of(challenger), "champion": sampling_of(champion)},
            "identity": {role: identity_quote(challenger), "champion": identity_quote(champion)}}


def identity_quote(batch: BatchSummary) -> dict:
    """What a decision record quotes of a batch's identity: its digest and, per role, the model."""
    identity = identity_of(batch) or {}
    return {"digest": identity.get("digest"),
            "models": {role: facts.get("model") for role, facts in identity.get("roles", {}).items()},
            "scaffold_hash": identity.get("scaffold_hash")}


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
