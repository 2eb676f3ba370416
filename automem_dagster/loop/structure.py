"""One round of the structure loop, as stages that read and write files.

rollout (training seeds, champion scaffold) -> diagnosis -> revision (a candidate version)
-> evaluation of candidate and champion on the fixed evaluation seeds -> decision.

Each stage is a plain function of its inputs that writes its outputs under ``runs/`` at a
path derived from those inputs, and returns what it wrote; rerunning a stage with the same
inputs resumes or reuses it. The round's order is ``round_plan.STRUCTURE_ROUND``: the Dagster
assets run these stages one each (the CLI runs those assets as one Dagster run), the DVC stages
through the step commands.

The champion pointer (``assets/lineage/<family>.json``) is changed in exactly one place,
``judge_challenger`` (``loop.ledgers.LineageLedger``, this loop's ledger), by one atomic file
replace after the decision is known. A failure anywhere
before that leaves the champion as it was and the candidate pending; the next round picks
the pending candidate up and finishes its evaluation instead of making a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from automem_dagster.llm.session import Clients
from automem_dagster.loop.challenger import RoundStart, VerdictRecord, load_verdict_record
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.seed_blocks import round_seeds
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import Storage, batch_dir
from automem_dagster.meta.batch_tools import BatchTools
from automem_dagster.meta.diagnose import Diagnosis, diagnose
from automem_dagster.meta.diagnosis_record import DIAGNOSIS_FILE
from automem_dagster.meta.revise import CANDIDATE_FILE, REVISION_FILE, Revision, propose_revision
from automem_dagster.meta.rules_reviser import rules_diagnose, rules_revision
from automem_dagster.options import BUDGET
from automem_dagster.rollout import BatchSummary, RolloutSpec
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.scaffold import Scaffold, content_hash, load_scaffold, load_scaffold_file, save_scaffold
from automem_dagster.scaffold.io import parse_scaffold
from automem_dagster.scaffold.lineage import Lineage

# --- stage 1: rollouts for diagnosis (on the seeds of ``seed_blocks.round_seeds``) -----------

def rollout_spec(settings: StructureConfig, scaffold: Scaffold, seeds: list[int], storage: Storage) -> RolloutSpec:
    """The round's diagnosis batch, which Dagster's ``rollout_batch`` plays in seed shards."""
    budget = settings.budget
    out = batch_dir(storage.runs, "rollouts", settings.game, scaffold.version, seeds, budget.rollout_max_steps)
    return RolloutSpec(settings.game, scaffold, seeds, budget.rollout_max_steps, out, budget.concurrency)


# --- stage 2: diagnosis ---------------------------------------------------------------------

def diagnosis_dir(storage: Storage, batch: Path) -> Path:
    batch = Path(batch)
    return storage.runs / "diagnoses" / batch.parent.parent.name / batch.parent.name / batch.name


async def diagnose_stage(batch: Path, scaffold: Scaffold, clients: Clients, storage: Storage,
                         max_attempts: int = BUDGET.max_attempts, out: Path | None = None) -> tuple[Diagnosis, Path]:
    """The diagnosis of ``batch`` (in ``out``, else a folder derived from the batch): read back when
    it exists, else asked of the meta-LLM and saved."""
    out = Path(out) if out else diagnosis_dir(storage, batch)
    if (out / DIAGNOSIS_FILE).exists():
        return Diagnosis.load(out), out
    if clients.rules_meta is not None:
        return rules_diagnose(batch, scaffold, out), out
    if clients.meta is None:
        raise RoundError("no meta endpoint: add a `meta:` entry to the endpoints file to diagnose and revise")
    return await diagnose(batch, scaffold, clients.meta, out, max_attempts, _tools_parent(scaffold, clients, storage)), out


def _tools_parent(scaffold: Scaffold, clients: Clients, storage: Storage) -> Scaffold | None:
    """The parent of ``scaffold``, for ``read_scaffold``'s diff when the meta-LLM uses tools."""
    reads_parent = clients.meta.config.meta_mode == "tools" and scaffold.parent is not None
    return load_scaffold(scaffold.game, scaffold.parent, storage.scaffolds) if reads_parent else None


# --- stage 3: revision ----------------------------------------------------------------------

def revision_dir(storage: Storage, diagnosis: Path) -> Path:
    """Where the revision answering ``diagnosis`` is kept: mirrored under ``runs/revisions`` for a diagnosis
    a round made, else beside it (``<diagnosis>-revision``, as ``finetune`` puts an adapter beside its dataset)."""
    diagnosis = Path(diagnosis)
    if diagnosis.is_relative_to(storage.runs / "diagnoses"):
        return storage.runs / "revisions" / diagnosis.relative_to(storage.runs / "diagnoses")
    return diagnosis.with_name(f"{diagnosis.name}-revision")


async def revise_stage(diagnosis: Diagnosis, diagnosis_path: Path, parent: Scaffold, clients: Clients, storage: Storage,
                       max_attempts: int = BUDGET.max_attempts, register: bool = True,
                       out: Path | None = None) -> tuple[Revision, Path]:
    """Ask for a revision of ``parent`` (saved in ``out``, else a folder derived from the diagnosis).
    With ``register``, an accepted one is saved as a new scaffold version and recorded in the
    lineage as a pending candidate (champion untouched)."""
    out = Path(out) if out else revision_dir(storage, diagnosis_path)
    lineage = storage.load_lineage(parent.game)
    if clients.rules_meta is not None:
        revision = rules_revision(parent, diagnosis, diagnosis_path, lineage.next_version())
    elif clients.meta is None:
        raise RoundError("no meta endpoint: add a `meta:` entry to the endpoints file to diagnose and revise")
    else:
        tools = None
        if clients.meta.config.meta_mode == "tools":  # the revision reads the batch the diagnosis was made from
            episodes = finished_episodes(Path(diagnosis.batch_dir))
            if not episodes:
                raise RoundError(f"{diagnosis.batch_dir}: the batch the diagnosis was made from has no finished "
                                 "trajectories, and the tool-using revision reads it; restore the batch or set "
                                 "meta_mode: one_call on the meta endpoint")
            tools = BatchTools.of_episodes(episodes, parent, _tools_parent(parent, clients, storage))
        revision = await propose_revision(parent, diagnosis.to_markdown(), diagnosis_path, clients.meta,
                                          lineage.next_version(), max_attempts, tools)
    revision = refuse_judged_again(revision, lineage)
    revision.save(out)
    if register and revision.accepted:
        register_candidate(load_scaffold_file(out / CANDIDATE_FILE), parent.version, diagnosis_path, storage, out)
    return revision, out


def refuse_judged_again(revision: Revision, lineage: Lineage) -> Revision:
    """``revision`` rejected when its candidate has the content of a version a round already judged: the
    same scaffold on the same seeds would only replay that verdict (the rules meta, which is deterministic,
    proposes the same change from the same evidence, and a meta-LLM can repeat itself), so the round ends
    as a rejected revision, which ``automem rounds`` counts towards its patience, without playing it."""
    if not revision.accepted:
        return revision
    digest = content_hash(parse_scaffold(yaml.safe_load(revision.candidate_yaml), "the revision's candidate"))
    judged = next((r for r in lineage.versions if r.content_hash == digest and r.decision is not None), None)
    if judged is None:
        return revision
    reason = (f"the candidate is v{judged.version} again (content hash {digest}), which a round already judged: "
              f"{judged.decision.replace('_', ' ')}; nothing new to evaluate")
    return replace(revision, candidate_yaml=None, rejected_reason=reason, diff_md=f"No candidate: {reason}\n")


def register_candidate(candidate: Scaffold, parent: int, diagnosis: Path | None, storage: Storage, kept_in: Path) -> None:
    """Save ``candidate`` as the next scaffold version and record it in the lineage as a pending child
    of ``parent`` (champion untouched); refused when another round took its number meanwhile. The
    revise stage (the CLI's, Dagster's and DVC's, with ``propose --register``) registers through here."""
    with storage.update_lineage(candidate.game) as current:
        if current.next_version() != candidate.version:
            raise RoundError(f"another round registered {candidate.game} v{candidate.version} while this one was "
                             f"revising; this revision is kept in {kept_in}: rerun the round to revise from the new state")
        save_scaffold(candidate, storage.scaffolds)
        current.record_candidate(candidate.version, parent, content_hash(candidate), diagnosis)


def pending_candidate(lineage: Lineage) -> int | None:
    """A candidate of the current champion still waiting for its decision (a round that failed
    after the revision), so the next round finishes it instead of revising again."""
    champion = lineage.champion().version
    pending = [r.version for r in lineage.versions if r.decision is None and r.parent == champion]
    return max(pending) if pending else None


def stored_revision_dir(storage: Storage, diagnosis: Path | str | None) -> Path | None:
    """The revision directory the stages derive from ``diagnosis``, where one is stored there; None without a
    diagnosis or a stored revision (one made with ``propose --out`` lives there, as a DVC round's does)."""
    path = revision_dir(storage, Path(diagnosis)) if diagnosis else None
    return path if path is not None and (path / REVISION_FILE).exists() else None


@dataclass(frozen=True)
class PendingCandidate:
    """The champion's candidate an earlier round registered and did not decide, and the folders of
    the diagnosis and revision that made it (None where they are not stored here)."""

    version: int
    diagnosis_dir: Path | None = None
    revision_dir: Path | None = None


def start_round(settings: StructureConfig, storage: Storage) -> RoundStart[PendingCandidate]:
    """The one rule for how a round begins: resume a pending candidate of the champion if there is one."""
    lineage = storage.load_lineage(settings.family)
    champion = load_scaffold(settings.family, lineage.champion().version, storage.scaffolds)
    pending = pending_candidate(lineage)
    if pending is None:
        return RoundStart(champion, seeds=round_seeds("structure", settings.game, settings.budget.rollout_episodes,
                                                      storage, settings.seed_block))
    diagnosis = lineage.record(pending).diagnosis
    return RoundStart(champion, PendingCandidate(pending, Path(diagnosis) if diagnosis else None,
                                                 stored_revision_dir(storage, diagnosis)))


# --- stage 4: evaluation on fixed seeds: ``loop.evaluation.evaluation_spec``, played in shards -----

# --- stage 5: the decision ------------------------------------------------------------------

def load_verdict(storage: Storage, game: str, version: int) -> VerdictRecord | None:
    return load_verdict_record(storage, game, "candidate", version)


# --- the whole round ------------------------------------------------------------------------

@dataclass(kw_only=True)
class RoundResult:
    """What a round produced, for its report and the CLI's table (``judged``: from a decision and its
    batches); ``revision`` is None when a pending candidate was resumed."""

    game: str
    parent: int
    candidate: int | None = None
    rollout: BatchSummary | None = None
    diagnosis_dir: Path | None = None
    revision: Revision | None = None
    revision_dir: Path | None = None
    candidate_eval: BatchSummary | None = None
    champion_eval: BatchSummary | None = None
    decision: VerdictRecord | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def judged(cls, decision: VerdictRecord, candidate_eval: BatchSummary, champion_eval: BatchSummary,
               diagnosis_dir: Path | None = None, revision_dir: Path | None = None) -> RoundResult:
        return cls(game=decision.game, parent=decision.champion_before, candidate=decision.challenger,
                   diagnosis_dir=diagnosis_dir, revision_dir=revision_dir, candidate_eval=candidate_eval,
                   champion_eval=champion_eval, decision=decision)

    @property
    def outcome(self) -> str:
        if self.decision is not None:
            return self.decision.outcome
        return "rejected"
