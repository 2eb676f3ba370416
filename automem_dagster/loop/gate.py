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
from automem_dagster.metrics.behaviour import behaviour_metrics
from automem_dagster.metrics.paired import GateDecision, GatePolicy, compare_metric, compare_paired, decide
from automem_dagster.metrics.power import detectable_gain
from automem_dagster.rollout import BatchSummary
from automem_dagster.rollout.trajectory import finished_episodes, read_manifest, read_trajectory

Record = TypeVar("Record")


def per_seed(summary: BatchSummary) -> dict[int, float]:
    return {e.seed: e.progression for e in summary.episodes}


def per_seed_metric(summary: BatchSummary, metric: str) -> dict[int, float]:
    """A ``BehaviourMetrics`` field per seed, computed from each finished trajectory of the batch (the
    summary pools episodes, and the equal_score gate pairs them seed by seed)."""
    values = {}
    for path in finished_episodes(Path(summary.out_dir)):
        header, steps, _ = read_trajectory(path)
        values[header["seed"]] = behaviour_metrics([steps]).as_dict()[metric]
    return values


def gate_scores(challenger: BatchSummary, champion: BatchSummary, role: str, gate: GatePolicy) -> dict:
    """What the gate reads of two batches, as an evaluation asset keeps it for its check: ``per_seed``
    progressions by role and, for a gate with a metric, ``per_seed_metric`` the same way."""
    scores = {"per_seed": {role: per_seed(challenger), "champion": per_seed(champion)}}
    if gate.metric:
        scores["per_seed_metric"] = {role: per_seed_metric(challenger, gate.metric),
                                     "champion": per_seed_metric(champion, gate.metric)}
    return scores


def decide_scores(scores: dict, role: str, gate: GatePolicy | None = None) -> GateDecision:
    """The gate on ``gate_scores``; a ValueError when they cannot be paired."""
    gate = gate or GatePolicy()
    mine, champ = scores["per_seed"][role], scores["per_seed"]["champion"]
    comparison = compare_paired(mine, champ)
    if not gate.metric:
        return decide(comparison, gate)
    metric = scores.get("per_seed_metric")
    if not metric:
        raise ValueError(f"the {gate.rule} gate reads {gate.metric} per seed, and this evaluation did not record it: "
                         "evaluate again with this gate in the round's settings")
    return decide(comparison, gate, compare_metric(mine, champ, metric[role], metric["champion"], gate))


def decide_paired(challenger: BatchSummary, champion: BatchSummary, role: str, gate: GatePolicy | None = None) -> GateDecision:
    """The gate of both loops: keep ``challenger`` (a ``role``: candidate or specialist) only if it
    beats the champion on the paired evaluation seeds under ``gate``. Refuses batches that do not cover
    the same seeds (an interrupted evaluation), since an unpaired comparison would judge different games."""
    gate = gate or GatePolicy()
    mine, champ = per_seed(challenger), per_seed(champion)
    if set(mine) != set(champ):
        raise RoundError(f"{role} seeds {sorted(mine)} and champion seeds {sorted(champ)} differ: "
                         "rerun the evaluation to finish both batches")
    return decide_scores(gate_scores(challenger, champion, role, gate), role, gate)


def sampling_of(batch: BatchSummary) -> dict:
    """How the batch's requests were seeded, as its batch.json recorded it (``agent.sampling``)."""
    recorded = read_manifest(Path(batch.out_dir)).get("sampling_seeds")
    return recorded or {"note": "not recorded: the batch was played before requests carried seeds"}


def decision_evidence(decision: GateDecision, challenger: BatchSummary, champion: BatchSummary, role: str) -> dict:
    """What a decision record keeps beside the comparison: the gate policy it was taken under, whether
    each side's endpoints honour sampling seeds (so whether a rerun would replay it), the smallest gain
    the gate could have detected on these seeds (``metrics.power``) and the equal_score gate's metric."""
    detectable = detectable_gain(per_seed(challenger), per_seed(champion), decision.policy)
    return {"gate": decision.policy.as_dict(),
            "sampling": {role: sampling_of(challenger), "champion": sampling_of(champion)},
            "detectable": {**detectable.as_dict(), "summary": detectable.describe()},
            "metric": asdict(decision.metric) if decision.metric else {}}


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
