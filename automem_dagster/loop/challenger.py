"""The challenger model both loops share: a round tests one challenger against the champion.

A structure round's challenger is a scaffold version (role ``candidate``), a proficiency round's a
memory adapter (role ``specialist``). Either way the round starts the same (``RoundStart``: resume
the challenger an earlier round left undecided, else play the champion on fresh training seeds),
the challenger and the champion are played on the same evaluation seeds (``loop.evaluation``), the
gate's verdict judges them pair by pair (``loop.gate``), and ``judge_challenger``, the one judging
entry point, records it in the loop's ``Ledger`` (``loop.ledgers``: the lineage or the specialist
registry, which holds the champion pointer) and in one ``VerdictRecord`` file. Only the ledger
differs between the loops.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from automem_dagster.atomic import write_json_atomic
from automem_dagster.loop.gate import paired_verdict, verdict_evidence
from automem_dagster.loop.ledgers import LEDGERS
from automem_dagster.loop.noise import gate_floors, load_noise, noise_evidence
from automem_dagster.loop.storage import Storage, slug
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.metrics.verdict import Verdict
from automem_dagster.rollout import BatchSummary
from automem_dagster.scaffold import Scaffold

Pending = TypeVar("Pending")

Challenger = int | str
"""A scaffold version (structure) or an adapter id (proficiency)."""


@dataclass(frozen=True)
class RoundStart(Generic[Pending]):
    """What a round does next, decided once for the CLI and the assets: finish the ``pending``
    challenger of an earlier round (one that stopped before its verdict), or play ``scaffold``
    (the champion) on the training ``seeds`` to make a new challenger."""

    scaffold: Scaffold
    pending: Pending | None = None
    seeds: list[int] = field(default_factory=list)

    @property
    def resumes(self) -> bool:
        return self.pending is not None


@dataclass
class VerdictRecord:
    """One round's verdict on its challenger (kept, rolled back or inconclusive), as stored in
    ``runs/decisions/<game>/<name>.json`` (the folder keeps its name so earlier rounds still load)."""

    game: str
    role: str
    """``candidate`` (a scaffold version) or ``specialist`` (a memory adapter)."""
    challenger: Challenger
    scaffold_version: int
    """The scaffold the challenger was played with: the candidate itself, or the specialist's scaffold."""
    champion_before: Challenger | None
    champion_after: Challenger | None
    """The champion pointer around the verdict: a scaffold version, or an adapter id (None: no specialist)."""
    keep: bool
    reason: str
    comparison: dict
    challenger_batch: str
    champion_batch: str
    gate: dict = field(default_factory=dict)
    """The gate policy the verdict was reached under (``GatePolicy``); empty in records from before policies."""
    sampling: dict = field(default_factory=dict)
    """Per side, how each endpoint treated the requests' sampling seeds (``agent.sampling.seed_support``)."""
    identity: dict = field(default_factory=dict)
    """Per side, the batch's identity digest and models (``gate.identity_quote``); empty in older records."""
    detectable: dict = field(default_factory=dict)
    """The smallest gain the gate could have detected on these seeds (``metrics.power.Detectable``)."""
    metric: dict = field(default_factory=dict)
    """The equal_score gate's metric on the same seeds (``MetricComparison``); empty for the other gates."""
    noise: dict = field(default_factory=dict)
    """The noise floor the verdict was reached under and how the champion was played (``loop.noise``);
    empty in records from before floors were measured."""
    inconclusive: bool = False
    """The gate could not tell the two apart at this budget (the champion stays; ``reason`` says how many
    seeds would); False in records from before the gate had three outcomes."""

    @property
    def outcome(self) -> str:
        return "inconclusive" if self.inconclusive else "kept" if self.keep else "rolled_back"

    def tracked(self) -> dict:
        """What MLflow keeps of the verdict on the challenger's run (``decision.json``)."""
        return {"keep": bool(self.keep), "outcome": self.outcome, "reason": self.reason,
                **{k: self.comparison[k] for k in ("mean_difference", "stderr_difference", "ci_low", "ci_high")}}

    @classmethod
    def from_json(cls, data: dict) -> VerdictRecord:
        """A stored record, also one written before both loops shared this record, which named the
        challenger and its batch after the role (``candidate``/``candidate_batch``, ``adapter``/``specialist_batch``)."""
        if "role" in data:
            return cls(**data)
        role = "candidate" if "candidate" in data else "specialist"
        name, batch = LEGACY_KEYS[role]
        rest = {k: v for k, v in data.items() if k not in (name, batch)}
        rest.setdefault("scaffold_version", data[name])  # a candidate is the scaffold it was played with
        return cls(role=role, challenger=data[name], challenger_batch=data[batch], **rest)


LEGACY_KEYS = {"candidate": ("candidate", "candidate_batch"), "specialist": ("adapter", "specialist_batch")}
"""Per role, the keys the challenger and its batch had in the two loops' records before ``VerdictRecord``."""


def record_name(role: str, challenger: Challenger) -> str:
    """The verdict file's name: ``v<N>`` for a candidate, ``specialist-<id>`` for an adapter."""
    return f"v{challenger}" if role == "candidate" else f"specialist-{challenger}"


def verdict_path(storage: Storage, game: str, role: str, challenger: Challenger) -> Path:
    return storage.runs / "decisions" / slug(game) / f"{record_name(role, challenger)}.json"


def load_verdict_record(storage: Storage, game: str, role: str, challenger: Challenger) -> VerdictRecord | None:
    """The verdict on ``challenger`` of ``game``; None when it was not taken yet."""
    path = verdict_path(storage, game, role, challenger)
    return VerdictRecord.from_json(json.loads(path.read_text())) if path.exists() else None


class Ledger(Protocol):
    """The file a loop records its challengers' fates and its champion pointer in (the lineage, the
    specialist registry), open under its lock for the one step a verdict takes."""

    role: str

    def champion(self) -> Challenger | None: ...

    def scaffold_version(self, challenger: Challenger) -> int: ...

    def earlier(self, challenger: Challenger) -> dict | None:
        """The verdict already recorded for ``challenger`` (``champion_before``, ``keep``, ``reason``,
        ``comparison``) when its file may be written again from the ledger; None when it is undecided.
        Raises ``RoundError`` for a challenger that may not be decided."""

    def settle(self, challenger: Challenger, verdict: Verdict) -> None:
        """Record ``verdict`` and, on a keep, make ``challenger`` the champion."""


def judge_challenger(role: str, game: str, challenger: Challenger, batches: tuple[BatchSummary, BatchSummary],
                      storage: Storage, gate: GatePolicy | None = None) -> VerdictRecord:
    """The one judging entry point of both loops and every driver (the CLI's and Dagster's rounds through
    Dagster's promotion, DVC's decide stages): the gate's verdict on the (challenger, champion) ``batches``
    against the champion's noise floor, recorded in the ``role``'s ledger (``loop.ledgers``: the lineage or
    the specialist registry) with the champion moved on a keep, as one step across processes, then written
    as the challenger's ``VerdictRecord``. Refuses batches that are not paired, and a challenger its ledger
    says may not be decided (decided already, or of another champion)."""
    mine, champion = batches
    with LEDGERS[role](storage, game) as book:
        known = {"game": game, "role": book.role, "challenger": challenger,
                 "scaffold_version": book.scaffold_version(challenger),
                 "challenger_batch": mine.out_dir, "champion_batch": champion.out_dir}
        earlier = book.earlier(challenger)
        if earlier is not None:  # decided, but the process died before the file was written
            record = VerdictRecord(**known, champion_after=book.champion(), **earlier)
        else:
            record = _settle(book, challenger, (mine, champion), storage, gate, known)
    write_json_atomic(verdict_path(storage, game, record.role, challenger), asdict(record))
    return record


def _settle(book: Ledger, challenger: Challenger, batches: tuple[BatchSummary, BatchSummary], storage: Storage,
            gate: GatePolicy | None, known: dict) -> VerdictRecord:
    """The verdict on ``batches``, with its evidence read before anything is written, settled in ``book``."""
    mine, champion = batches
    before = book.champion()
    noise = load_noise(storage, champion)
    verdict = paired_verdict(mine, champion, book.role, gate, **gate_floors(noise, gate and gate.metric))
    evidence = verdict_evidence(verdict, mine, champion, book.role)
    said = noise_evidence(noise, champion, storage)
    book.settle(challenger, verdict)
    return VerdictRecord(**known, champion_before=before, champion_after=book.champion(), keep=verdict.keep,
                          inconclusive=verdict.outcome == "inconclusive",
                          reason=f"{verdict.reason}; champion {said['champion_play']}",
                          comparison=asdict(verdict.comparison), noise=said, **evidence)
