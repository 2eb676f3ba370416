"""The gate of both loops: a challenger (a scaffold candidate or a specialist adapter) against the
champion on the paired evaluation seeds, and the evidence a verdict record keeps beside the comparison."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from automem_dagster.loop.errors import RoundError
from automem_dagster.metrics.paired import GatePolicy, compare_metric, compare_paired
from automem_dagster.metrics.power import detectable_gain
from automem_dagster.metrics.verdict import Verdict, gate_verdict
from automem_dagster.rollout import BatchSummary
from automem_dagster.rollout.identity import differences, summarize_fields
from automem_dagster.rollout.trajectory import finished_episodes, read_trajectory


def per_seed(summary: BatchSummary) -> dict[int, float]:
    """Each episode's progression, by seed: what the gate pairs."""
    return {e.seed: e.progression for e in summary.episodes}


def episodes_of(summary: BatchSummary) -> dict[int, list[dict]]:
    """Each finished trajectory's steps, by seed (for readings the summary does not carry)."""
    episodes = {}
    for path in finished_episodes(Path(summary.out_dir)):
        header, steps, _ = read_trajectory(path)
        episodes[header["seed"]] = steps
    return episodes


def gate_scores(challenger: BatchSummary, champion: BatchSummary, role: str, gate: GatePolicy) -> dict:
    """What the gate reads of two batches, as an evaluation asset keeps it for its check: ``per_seed``
    progressions by role and, for a gate with a metric, ``per_seed_metric`` and the ``guards`` the same way."""
    scores = {"per_seed": {role: per_seed(challenger), "champion": per_seed(champion)}}
    if gate.metric:
        scores["per_seed_metric"] = {role: challenger.per_seed_metric(gate.metric),
                                     "champion": champion.per_seed_metric(gate.metric)}
        scores["guards"] = {name: batch.guards or {} for name, batch in ((role, challenger), ("champion", champion))}
    return scores


def verdict_of_scores(scores: dict, role: str, gate: GatePolicy | None = None, floor: float | None = None,
                      metric_floor: float | None = None, floor_basis: str | None = None) -> Verdict:
    """The gate on ``gate_scores`` with the noise floor ``floor`` (points; None: not measured) and, for a gate
    with a metric, that metric's A/A floor ``metric_floor``, quoting the seeds a decision would need
    (``metrics.power``); a ValueError when they cannot be paired."""
    gate = gate or GatePolicy()
    mine, champ = scores["per_seed"][role], scores["per_seed"]["champion"]
    comparison = compare_paired(mine, champ)
    detectable = detectable_gain(mine, champ, gate)
    if not gate.metric:
        return gate_verdict(comparison, gate, floor=floor, detectable=detectable, floor_basis=floor_basis)
    metric = scores.get("per_seed_metric")
    if not metric:
        raise ValueError(f"the {gate.rule} gate reads {gate.metric} per seed, and this evaluation did not record it: "
                         "evaluate again with this gate in the round's settings")
    guards = scores.get("guards", {})
    paired_guards = {name: (guards[role][name], guards["champion"][name]) for name in guards.get(role, {})}
    metric = compare_metric(mine, champ, metric[role], metric["champion"], gate, guards=paired_guards)
    return gate_verdict(comparison, gate, metric, floor=floor, detectable=detectable, metric_floor=metric_floor,
                        floor_basis=floor_basis)


TESTED = {"candidate": ("scaffold_hash",), "specialist": ("roles.memory",)}
"""What each round tests, as identity fields (``rollout.identity``): a structure round's candidate
differs from its champion in the scaffold alone, a proficiency round's specialist in its memory
role (the adapter serving it); any other difference would be credited to the challenger."""


def pairing_differences(challenger: BatchSummary, champion: BatchSummary, role: str) -> list[str]:
    """The identity fields in which the two batches differ beyond what a ``role`` round tests;
    raises ``RoundError`` when either batch has no identity (it is unknown what played it)."""
    mine, champ = challenger.identity, champion.identity
    for name, batch, identity in ((role, challenger, mine), ("champion", champion, champ)):
        if identity is None:
            raise RoundError(f"the {name} batch {batch.out_dir} records no identity (it was played before batches "
                             "recorded what played them), so nothing says which model played it: evaluate it again")
    tested = TESTED[role]
    return [f for f in differences(mine, champ)
            if f not in ("seeds", "digest") and not any(f == t or f.startswith(t + ".") for t in tested)]


def paired_verdict(challenger: BatchSummary, champion: BatchSummary, role: str, gate: GatePolicy | None = None,
                   floor: float | None = None, metric_floor: float | None = None,
                   floor_basis: str | None = None) -> Verdict:
    """The gate of both loops: keep ``challenger`` (a ``role``: candidate or specialist) only if it
    beats the champion on the paired evaluation seeds under ``gate``, by more than the noise ``floor``
    (points, and ``metric_floor`` for the gate's metric: the identity's A/A record, ``loop.noise``).
    Refuses a batch with an unfinished episode (``BatchSummary.unfinished``) and batches that do not
    cover the same seeds (an interrupted evaluation), since an unpaired
    comparison would judge different games, and batches whose identities differ in more than the round
    tests (``pairing_differences``)."""
    gate = gate or GatePolicy()
    for name, batch in ((role, challenger), ("champion", champion)):
        if batch.unfinished:
            raise RoundError(f"the {name} batch {batch.out_dir} has unfinished episodes (seeds {batch.unfinished}: "
                             "abandoned after their endpoint's retries, or not played yet), so nothing is decided; "
                             "rerun its evaluation, which resumes them, once the endpoint answers")
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
    return verdict_of_scores(gate_scores(challenger, champion, role, gate), role, gate, floor, metric_floor, floor_basis)


def sampling_of(batch: BatchSummary) -> dict:
    """How the batch's requests were seeded, as its batch.json recorded it (``agent.sampling``, carried by the summary)."""
    return batch.sampling_seeds or {"note": "not recorded: the batch was played before requests carried seeds"}


def verdict_evidence(verdict: Verdict, challenger: BatchSummary, champion: BatchSummary, role: str) -> dict:
    """What a verdict record keeps beside the comparison: the gate policy it was taken under, whether
    each side's endpoints honour sampling seeds (so whether a rerun would replay it), the smallest gain
    the gate could have detected on these seeds (``metrics.power``) and the equal_score gate's metric."""
    detectable = detectable_gain(per_seed(challenger), per_seed(champion), verdict.policy)
    return {"gate": verdict.policy.as_dict(),
            "sampling": {role: sampling_of(challenger), "champion": sampling_of(champion)},
            "detectable": {**detectable.as_dict(), "summary": detectable.describe()},
            "metric": asdict(verdict.metric) if verdict.metric else {},
            "identity": {role: identity_quote(challenger), "champion": identity_quote(champion)}}


def identity_quote(batch: BatchSummary) -> dict:
    """What a verdict record quotes of a batch's identity: its digest and, per role, the model."""
    identity = batch.identity or {}
    return {"digest": identity.get("digest"),
            "models": {role: facts.get("model") for role, facts in identity.get("roles", {}).items()},
            "scaffold_hash": identity.get("scaffold_hash")}
