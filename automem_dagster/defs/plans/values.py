"""The values a round's assets and steps pass to each other, typed: a reader gets attributes, not keys.

Each is a frozen dataclass built by a step's body and read by the steps after it (and by the CLI's rounds,
``defs/cli_rounds.py``), so a field renamed or missing is an error where the code is read, not a ``KeyError``
in a later step of a run. Dagster's IO manager (``execution/step_values.py``) pickles each value to a file and
the next step unpickles it, in this process, another one or on a Celery worker that imports this module: a
dataclass travels as it is, so every executor reads back the same type. Paths are strings, as the steps'
folders are written (a played batch's value is its folder, a ``str``).

A round that resumes an earlier round's challenger plays nothing and makes nothing before it: its first step
yields ``Resumed``, which each step before the challenger's passes on (``resumed``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from automem_dagster.loop.challenger import VerdictRecord
from automem_dagster.loop.report import RoundReport
from automem_dagster.loop.structure import PendingCandidate
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.training.registry import AdapterRecord


@dataclass(frozen=True)
class Resumed:
    """A round's first value when it resumes the ``pending`` challenger instead of making one (``reason``
    says so), as the round's start found it (``loop.challenger.RoundStart``): the structure round's
    ``PendingCandidate``, the proficiency round's ``AdapterRecord``. Its play plan and every step before the
    challenger's pass it on."""

    reason: str
    pending: PendingCandidate | AdapterRecord


def resumed(value: object) -> PendingCandidate | AdapterRecord | None:
    """The challenger a round resumes, where a step's ``value`` is the ``Resumed`` its first step passed on
    instead of its own result: the steps after it read the challenger from it rather than deciding the
    round's start again."""
    return value.pending if isinstance(value, Resumed) else None


@dataclass(frozen=True)
class PlayPlan:
    """What a rollout asset plays: the champion scaffold ``version`` on training ``seeds``."""

    version: int
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Shard:
    """One shard step's work: the seeds ``index`` of the batch ``arm`` plays (its spec as
    ``rollout.shards.spec_record`` writes it; ``arm`` None and no spec: the one empty shard of a plan that plays
    nothing), the memory role removed with ``one_model``, and for the proficiency round the ``adapter`` under
    evaluation and the specialist in service (``champion_adapter``). A played shard adds the ``endpoints`` it
    was played on and where (``played_in``: host and process; None when nothing had to be played)."""

    arm: str | None
    index: int
    seeds: tuple[int, ...]
    spec: dict | None = None
    one_model: bool = False
    adapter: str | None = None
    champion_adapter: str | None = None
    endpoints: dict = field(default_factory=dict)
    played_in: dict | None = None


@dataclass(frozen=True)
class Candidate:
    """``scaffold_candidate``'s value: the revision of scaffold ``parent`` (``outcome`` accepted, rejected or
    resumed), the ``candidate`` version when there is one, the folders of the diagnosis and revision it came
    from, and why a revision was rejected (``reason``)."""

    game: str
    outcome: str
    parent: int
    candidate: int | None = None
    diagnosis_dir: str | None = None
    revision_dir: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class NotDiagnosed:
    """``diagnosis``'s value when the meta-LLM gave no usable diagnosis of scaffold ``scaffold_version`` within its
    attempts (``reason`` says why and where its replies are kept): the round revises nothing, as designed."""

    scaffold_version: int
    reason: str


@dataclass(frozen=True)
class EvaluationPlan:
    """What an evaluation asset plays: the ``challenger`` (a candidate version or an adapter id) against the
    champion in service on the fixed ``seeds``, ``eval_max_steps`` steps each, judged by ``gate`` (the round's
    ``GatePolicy``, passed on to the decision unchanged). The structure round names the ``champion`` version
    and the ``candidate`` it evaluates (its folders go to the decision's report); the proficiency round the
    ``scaffold_version`` both agents play and the adapter's ``loss_plot``."""

    game: str
    challenger: int | str
    seeds: tuple[int, ...]
    eval_max_steps: int
    gate: GatePolicy
    champion: int | None = None
    candidate: Candidate | None = None
    scaffold_version: int | None = None
    loss_plot: str | None = None


@dataclass(frozen=True)
class NotEvaluated:
    """An evaluation asset's value when there was nothing to play: why (the revision made no candidate)."""

    game: str
    reason: str


@dataclass(frozen=True)
class Evaluation:
    """An evaluation asset's value, what its gate check previews and the promotion decides on: the ``plan``,
    both batch folders, the gate's per-seed ``scores`` under the plan's gate (``loop.gate.gate_scores``), the
    noise floors of the champion's identity (``loop.noise.gate_floors``) and the ``endpoints`` that played."""

    plan: EvaluationPlan
    challenger_batch: str
    champion_batch: str
    scores: dict
    noise_floor: dict
    endpoints: dict


@dataclass(frozen=True)
class Promotion:
    """A decision asset's value: the keep-or-rollback ``record`` (None when there was nothing to decide, and
    ``reason`` says why) and the ``report`` of the plots and MLflow runs it made, which the CLI prints."""

    game: str
    record: VerdictRecord | None
    report: RoundReport = field(default_factory=RoundReport)
    reason: str | None = None


@dataclass(frozen=True)
class Dataset:
    """``sft_dataset``'s value: the curated dataset's folder and the scaffold version whose decisions it holds."""

    dataset_dir: str
    scaffold_version: int


@dataclass(frozen=True)
class LoraFile:
    """``lora_config``'s value: the ``dataset`` and the file of the LoRA settings chosen for it."""

    dataset: Dataset
    config_file: str


@dataclass(frozen=True)
class Adapter:
    """``lora_adapter``'s value: the ``adapter`` trained or resumed (``outcome``), its loss plot and the
    report of its training (its MLflow run and plot, for the CLI)."""

    game: str
    adapter: str
    outcome: str
    loss_plot: str
    report: RoundReport
