"""One round of the structure loop, as stages that read and write files.

rollout (training seeds, champion scaffold) -> diagnosis -> revision (a candidate version)
-> evaluation of candidate and champion on the fixed evaluation seeds -> decision.

Each stage is a plain function of its inputs that writes its outputs under ``runs/`` at a
path derived from those inputs, and returns what it wrote; rerunning a stage with the same
inputs resumes or reuses it. The CLI runs all stages in one process (``run_round``); the
Dagster assets and the DVC stages run them one at a time, through these same functions.

The champion pointer (``assets/lineage/<family>.json``) is changed in exactly one place,
``decide``, by one atomic file replace after the decision is known. A failure anywhere
before that leaves the champion as it was and the candidate pending; the next round picks
the pending candidate up and finishes its evaluation instead of making a new one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from automem_dagster.agent.baselines import DEFAULT_WINDOW, WINDOWED
from automem_dagster.atomic import write_json_atomic
from automem_dagster.games import game_family
from automem_dagster.llm.session import Clients
from automem_dagster.meta.diagnose import Diagnosis, diagnose
from automem_dagster.meta.revise import Revision, propose_revision
from automem_dagster.metrics.paired import Decision, GatePolicy, compare_paired, decide
from automem_dagster.paths import RUNS, SCAFFOLDS
from automem_dagster.rollout import BatchSummary, RolloutSpec, run_batch
from automem_dagster.rollout.runner import Progress
from automem_dagster.rollout.seeds import DEFAULT_SEEDS_FILE, assert_disjoint, eval_seeds, training_seeds
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold import Scaffold, content_hash, load_scaffold, load_scaffold_file, save_scaffold
from automem_dagster.scaffold.lineage import DEFAULT_ROOT as LINEAGE_ROOT
from automem_dagster.scaffold.lineage import Lineage
from automem_dagster.training.registry import DEFAULT_ROOT as SPECIALISTS_ROOT


class RoundError(RuntimeError):
    """A round that cannot go on; the message says which stage and what to do."""


@dataclass(frozen=True)
class RoundSettings:
    """The budget of one round. Defaults are AutoMem's evaluation sets (``assets/seeds``);
    ``eval_episodes`` takes the first k evaluation seeds for a cheap local round; ``gate`` is the
    keep-or-rollback policy (AutoMem's strictly higher mean unless a round asks for ``significant``)."""

    game: str
    rollout_episodes: int = 4
    rollout_max_steps: int = 50
    eval_max_steps: int = 50
    eval_episodes: int | None = None
    concurrency: int = 2
    max_attempts: int = 3
    gate: GatePolicy = field(default_factory=GatePolicy)

    @property
    def family(self) -> str:
        return game_family(self.game)

    def eval_seed_list(self, seeds_file: Path = DEFAULT_SEEDS_FILE) -> list[int]:
        seeds = eval_seeds(self.game, seeds_file)
        return seeds[: self.eval_episodes] if self.eval_episodes else seeds


@dataclass(frozen=True)
class Storage:
    """Where a round reads and writes: generated outputs, scaffold versions, the lineage, the
    specialist registry of the proficiency loop."""

    runs: Path = RUNS
    scaffolds: Path = SCAFFOLDS
    lineage: Path = LINEAGE_ROOT
    seeds_file: Path = DEFAULT_SEEDS_FILE
    specialists: Path = SPECIALISTS_ROOT

    def load_lineage(self, family: str) -> Lineage:
        return Lineage.load(family, self.lineage, self.scaffolds)

    def update_lineage(self, family: str):
        """``with storage.update_lineage(family) as lineage:`` change it under its cross-process lock."""
        return Lineage.updating(family, self.lineage, self.scaffolds)


def slug(game: str) -> str:
    """A game name usable as one path component (``minihack:Corridor-R3`` -> ``minihack-Corridor-R3``)."""
    return game.replace(":", "-")


def batch_dir(root: Path, kind: str, game: str, version: int, seeds: list[int], max_steps: int,
              agent: str = "memory", window: int = DEFAULT_WINDOW) -> Path:
    """The directory of a batch, determined by its settings, so the same settings resume it.

    A memory-agent batch sits under its scaffold version (``.../v3/...``); a baseline, which
    uses no scaffold, under its own name (``.../random/...``, ``.../window/...-window8``)."""
    name = f"steps{max_steps}-seeds{seeds[0]}-{seeds[-1]}-n{len(seeds)}"
    if agent == "memory":
        return Path(root) / kind / slug(game) / f"v{version}" / name
    return Path(root) / kind / slug(game) / agent / (name + (f"-window{window}" if agent in WINDOWED else ""))


def champion_scaffold(family: str, storage: Storage) -> Scaffold:
    champion = storage.load_lineage(family).champion()
    return load_scaffold(family, champion.version, storage.scaffolds)


def resolve_scaffold(game: str, ref: str, storage: Storage) -> Scaffold:
    """``champion``, ``v<N>``/``<N>`` or a path to a scaffold YAML file."""
    family = game_family(game)
    if ref == "champion":
        return champion_scaffold(family, storage)
    if ref.removeprefix("v").isdigit():
        return load_scaffold(family, ref, storage.scaffolds)
    return load_scaffold_file(Path(ref))


# --- stage 1: rollouts for diagnosis --------------------------------------------------------

def diagnosis_seeds(settings: RoundSettings, lineage: Lineage, storage: Storage) -> list[int]:
    """Fresh training seeds per round (round r takes the r-th block), disjoint from evaluation."""
    offset = (lineage.next_version() - 1) * settings.rollout_episodes
    seeds = training_seeds(settings.game, settings.rollout_episodes, offset, storage.seeds_file)
    assert_disjoint(seeds, eval_seeds(settings.game, storage.seeds_file))
    return seeds


async def rollout_stage(settings: RoundSettings, scaffold: Scaffold, seeds: list[int], clients: Clients,
                        storage: Storage, progress: Progress | None = None) -> BatchSummary:
    out = batch_dir(storage.runs, "rollouts", settings.game, scaffold.version, seeds, settings.rollout_max_steps)
    spec = RolloutSpec(settings.game, scaffold, seeds, settings.rollout_max_steps, out, settings.concurrency)
    return await run_batch(spec, clients, progress)


# --- stage 2: diagnosis ---------------------------------------------------------------------

def diagnosis_dir(storage: Storage, batch: Path) -> Path:
    batch = Path(batch)
    return storage.runs / "diagnoses" / batch.parent.parent.name / batch.parent.name / batch.name


async def diagnose_stage(batch: Path, scaffold: Scaffold, clients: Clients, storage: Storage,
                         max_attempts: int = 3) -> tuple[Diagnosis, Path]:
    """The diagnosis of ``batch``: read back when it exists, else asked of the meta-LLM and saved."""
    out = diagnosis_dir(storage, batch)
    if (out / "diagnosis.json").exists():
        return Diagnosis.load(out), out
    if clients.meta is None:
        raise RoundError("no meta endpoint: add a `meta:` entry to the endpoints file to diagnose and revise")
    reads_parent = clients.meta.config.meta_mode == "tools" and scaffold.parent is not None  # for read_scaffold's diff
    parent = load_scaffold(scaffold.game, scaffold.parent, storage.scaffolds) if reads_parent else None
    return await diagnose(batch, scaffold, clients.meta, out, max_attempts, parent), out


# --- stage 3: revision ----------------------------------------------------------------------

def revision_dir(storage: Storage, diagnosis: Path) -> Path:
    return storage.runs / "revisions" / Path(diagnosis).relative_to(storage.runs / "diagnoses")


async def revise_stage(diagnosis: Diagnosis, diagnosis_path: Path, parent: Scaffold, clients: Clients, storage: Storage,
                       max_attempts: int = 3, register: bool = True) -> tuple[Revision, Path]:
    """Ask for a revision of ``parent``. With ``register``, an accepted one is saved as a new
    scaffold version and recorded in the lineage as a pending candidate (champion untouched)."""
    out = revision_dir(storage, diagnosis_path)
    lineage = storage.load_lineage(parent.game)
    if clients.meta is None:
        raise RoundError("no meta endpoint: add a `meta:` entry to the endpoints file to diagnose and revise")
    revision = await propose_revision(parent, diagnosis.to_markdown(), diagnosis_path, clients.meta,
                                      lineage.next_version(), max_attempts)
    revision.save(out)
    if register and revision.accepted:
        candidate = load_scaffold_file(out / "candidate.yaml")
        with storage.update_lineage(parent.game) as current:
            if current.next_version() != candidate.version:
                raise RoundError(f"another round registered {parent.game} v{candidate.version} while this one was "
                                 f"revising; this revision is kept in {out}: rerun the round to revise from the new state")
            save_scaffold(candidate, storage.scaffolds)
            current.record_candidate(candidate.version, parent.version, content_hash(candidate), diagnosis_path)
    return revision, out


def pending_candidate(lineage: Lineage) -> int | None:
    """A candidate of the current champion still waiting for its decision (a round that failed
    after the revision), so the next round finishes it instead of revising again."""
    champion = lineage.champion().version
    pending = [r.version for r in lineage.versions if r.decision is None and r.parent == champion]
    return max(pending) if pending else None


# --- stage 4: evaluation on fixed seeds -----------------------------------------------------

async def evaluate_stage(game: str, scaffold: Scaffold, seeds: list[int], max_steps: int, clients: Clients,
                         storage: Storage, concurrency: int = 2, progress: Progress | None = None,
                         out: Path | None = None, agent: str = "memory", window: int = DEFAULT_WINDOW) -> BatchSummary:
    """Play ``scaffold`` (or the baseline ``agent``) on the evaluation ``seeds``; a batch already
    played is reused, so the champion is evaluated once per seed set and step budget, not once per round."""
    out = out or batch_dir(storage.runs, "evaluations", game, scaffold.version, seeds, max_steps, agent, window)
    spec = RolloutSpec(game, scaffold, seeds, max_steps, out, concurrency, agent=agent, window=window)
    return await run_batch(spec, clients, progress)


def per_seed(summary: BatchSummary) -> dict[int, float]:
    return {e.seed: e.progression for e in summary.episodes}


def decide_paired(challenger: BatchSummary, champion: BatchSummary, role: str, gate: GatePolicy | None = None) -> Decision:
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


def decision_evidence(decision: Decision, challenger: BatchSummary, champion: BatchSummary, role: str) -> dict:
    """What a decision record keeps beside the comparison: the gate policy it was taken under and
    whether each side's endpoints honour sampling seeds (so whether a rerun would replay it)."""
    return {"gate": decision.policy.as_dict(),
            "sampling": {role: sampling_of(challenger), "champion": sampling_of(champion)}}


# --- stage 5: the decision ------------------------------------------------------------------

@dataclass
class DecisionRecord:
    """What ``decide`` did, as stored in ``runs/decisions/<game>/v<N>.json``."""

    game: str
    candidate: int
    champion_before: int
    champion_after: int
    keep: bool
    reason: str
    comparison: dict
    candidate_batch: str
    champion_batch: str
    gate: dict = field(default_factory=dict)
    """The gate policy the decision was taken under (``GatePolicy``); empty in records from before policies."""
    sampling: dict = field(default_factory=dict)
    """Per side, how each endpoint treated the requests' sampling seeds (``agent.sampling.seed_support``)."""


def decide_stage(game: str, candidate_version: int, candidate: BatchSummary, champion: BatchSummary,
                 storage: Storage, gate: GatePolicy | None = None) -> DecisionRecord:
    """Compare on the paired seeds, record the decision, and move the champion pointer on keep.

    Refuses to decide on batches that do not cover the same seeds (an interrupted evaluation),
    and on a candidate that is not a pending child of the current champion.
    """
    family = game_family(game)
    with storage.update_lineage(family) as lineage:  # read, check, decide and save as one step across processes
        before = lineage.champion().version
        record = lineage.record(candidate_version)
        if record.decision is not None:
            raise RoundError(f"{family} v{candidate_version} was already decided ({record.decision}); start a new round")
        if record.parent != before:
            raise RoundError(f"{family} v{candidate_version} descends from v{record.parent}, but the champion is now "
                             f"v{before}: evaluate a revision of the current champion instead")
        decision = decide_paired(candidate, champion, "candidate", gate)
        evidence = decision_evidence(decision, candidate, champion, "candidate")  # read before anything is written
        lineage.record_decision(candidate_version, decision)
        if decision.keep:
            lineage.promote(candidate_version)
        after = lineage.champion().version
    result = DecisionRecord(game, candidate_version, before, after, decision.keep, decision.reason,
                            asdict(decision.comparison), candidate.out_dir, champion.out_dir,
                            **evidence)
    write_json_atomic(storage.runs / "decisions" / slug(game) / f"v{candidate_version}.json", asdict(result))
    return result


def load_decision(storage: Storage, game: str, version: int) -> DecisionRecord | None:
    path = storage.runs / "decisions" / slug(game) / f"v{version}.json"
    return DecisionRecord(**json.loads(path.read_text())) if path.exists() else None


# --- the whole round ------------------------------------------------------------------------

@dataclass
class RoundResult:
    """What a round produced; ``revision`` is None when a pending candidate was resumed."""

    game: str
    parent: int
    candidate: int | None
    rollout: BatchSummary | None
    diagnosis_dir: Path | None
    revision: Revision | None
    revision_dir: Path | None
    candidate_eval: BatchSummary | None = None
    champion_eval: BatchSummary | None = None
    decision: DecisionRecord | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        if self.decision is not None:
            return "kept" if self.decision.keep else "rolled_back"
        return "rejected"


Stage = Callable[[str], None]
"""Called with a line when a stage starts, for progress output."""


async def run_round(settings: RoundSettings, clients: Clients, storage: Storage = Storage(),
                    progress: Progress | None = None, on_stage: Stage | None = None) -> RoundResult:
    """Rollouts, diagnosis, revision, evaluation and decision for ``settings.game``."""
    say = on_stage or (lambda line: None)
    family = settings.family
    lineage = storage.load_lineage(family)
    champion = champion_scaffold(family, storage)
    pending = pending_candidate(lineage)
    if pending is not None:
        diagnosis = lineage.record(pending).diagnosis
        diag_dir = Path(diagnosis) if diagnosis else None
        result = RoundResult(settings.game, champion.version, pending, None, diag_dir, None,
                             revision_dir(storage, diag_dir) if diag_dir else None,
                             notes=[f"resumed pending candidate v{pending} of an earlier round"])
        say(f"resuming pending candidate v{pending} (an earlier round stopped before its decision)")
    else:
        seeds = diagnosis_seeds(settings, lineage, storage)
        say(f"rollouts: champion v{champion.version} on training seeds {seeds}")
        rollout = await rollout_stage(settings, champion, seeds, clients, storage, progress)
        say("diagnosis: the meta-LLM reads the trajectories")
        diag, diag_dir = await diagnose_stage(Path(rollout.out_dir), champion, clients, storage, settings.max_attempts)
        say("revision: the meta-LLM proposes a patch")
        revision, rev_dir = await revise_stage(diag, diag_dir, champion, clients, storage, settings.max_attempts)
        result = RoundResult(settings.game, champion.version, revision.version if revision.accepted else None,
                             rollout, diag_dir, revision, rev_dir)
        if not revision.accepted:
            say(f"revision rejected: {revision.rejected_reason}")
            return result
    candidate = load_scaffold(family, result.candidate, storage.scaffolds)
    seeds = settings.eval_seed_list(storage.seeds_file)
    say(f"evaluation: candidate v{candidate.version} and champion v{champion.version} on seeds {seeds}")
    result.candidate_eval = await evaluate_stage(settings.game, candidate, seeds, settings.eval_max_steps, clients,
                                                 storage, settings.concurrency, progress)
    result.champion_eval = await evaluate_stage(settings.game, champion, seeds, settings.eval_max_steps, clients,
                                                storage, settings.concurrency, progress)
    result.decision = decide_stage(settings.game, candidate.version, result.candidate_eval, result.champion_eval, storage,
                                   settings.gate)
    say(result.decision.reason)
    return result


__all__ = [
    "DecisionRecord", "RoundError", "RoundResult", "RoundSettings", "Storage", "batch_dir",
    "champion_scaffold", "decide_stage", "diagnose_stage", "diagnosis_seeds", "evaluate_stage", "load_decision",
    "pending_candidate", "per_seed", "resolve_scaffold", "revise_stage", "rollout_stage", "run_round", "slug",
]
