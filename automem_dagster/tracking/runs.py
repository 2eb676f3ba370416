"""What the project records in MLflow, as plain data: an evaluation run, a training run, the run
a tracker logged, and where the store is. No MLflow import, so the rollout path stays light."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from automem_dagster.agent.baselines import AGENTS
from automem_dagster.games import families
from automem_dagster.paths import PROJECT_ROOT

MLFLOW_DIR = PROJECT_ROOT / "mlflow"

DEFAULT_ARTIFACT_ROOT = MLFLOW_DIR / "artifacts"

DEFAULT_UI_URL = "http://127.0.0.1:5000"

COST_PER_STEP = ("model_calls_per_step", "input_tokens_per_step", "output_tokens_per_step")
"""The per-step cost metrics ``automem compare`` shows beside progression (embedding and summary calls included)."""

ROLES = ("candidate", "champion", "evaluation", "baseline", "specialist")
"""``specialist``: the two-model agent, the champion scaffold with a LoRA memory specialist."""

ENDPOINT_FIELDS = ("name", "kind", "model", "base_url", "constrained", "temperature", "lora_id")
"""The endpoint facts logged as params: an allow-list, so a key or token added to an endpoint
description later can never reach the tracking store (``kind``: the rules meta's, ``RulesMeta.facts``)."""

class TrackingError(RuntimeError):
    """The tracking store cannot be reached or used; the message names the URI and a fix."""


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` when set, else the project's sqlite store (mlflow 3 refuses ``file:`` stores)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(MLFLOW_DIR / 'mlflow.db').resolve()}"


@dataclass(frozen=True)
class TrackedRun:
    run_id: str
    experiment_id: str
    url: str
    """Link into the MLflow UI, for Dagster metadata and log lines."""


@dataclass
class EvaluationRun:
    """Everything recorded about one evaluation of one scaffold version on fixed seeds.

    Progressions are in percent. ``endpoints`` is ``Clients.describe()``; only the fields in
    ``ENDPOINT_FIELDS`` are logged. ``verdict`` is the keep-or-rollback outcome of a paired
    comparison (keep, reason, mean_difference, stderr_difference, ci_low, ci_high).
    ``agent`` is ``memory`` for a scaffold's agent; a baseline (``random``, ``window``, ``cot``)
    has role ``baseline``, and ``version`` is then the scaffold its batch was filed with.
    ``window`` is the history length of a windowed baseline; ``settings`` the ``rag`` or ``summary``
    baseline's own (``agent.memory_settings``), logged as the ``agent_settings`` param.
    """

    game: str
    family: str
    version: int
    parent: int | None
    content_hash: str
    role: str
    round_id: str | None
    seeds: list[int]
    max_steps: int
    endpoints: dict
    progression_mean: float
    progression_se: float
    per_seed: dict[int, float]
    behaviour: dict[str, float]
    scaffold_yaml: str
    retries: dict[str, float] = field(default_factory=dict)  # RetryStats.as_metrics(): attempts, retries by cause
    diagnosis_md: str | None = None
    diff_md: str | None = None
    verdict: dict | None = None
    diagnosis: dict | None = None
    """The round's diagnosis, ``Diagnosis.tracking_summary()``: ``meta_mode`` and ``metrics``."""
    plots: list[Path] = field(default_factory=list)
    extra_artifacts: list[Path] = field(default_factory=list)
    agent: str = "memory"
    window: int | None = None
    settings: dict | None = None
    adapter: str | None = None
    """The LoRA memory specialist (``a1``...) of a ``specialist`` run."""
    meta: str | None = None
    """Which meta made this version (``rules`` or ``llm <endpoint> (<model>)``), for a round's candidate."""
    batch: str | None = None
    """The batch folder the figures come from (tag ``automem.batch``): a batch is logged once (``tracking.batches``)."""
    identity: dict | None = None
    """The batch's identity (``rollout.identity``, from its batch.json): its digest is tag
    ``automem.identity`` and what played it params ``identity.*``, so runs of two models never look alike."""
    span_ms: tuple[int, int] | None = None
    """When the batch was played (first episode's start, last one's end, ms since the epoch): the run's
    start and end times, so MLflow shows how long the evaluation took, not how long logging it took."""

    def __post_init__(self) -> None:
        if self.family not in families():
            raise ValueError(f"family {self.family!r} of {self.game!r}: expected one of {families()}")
        if self.role not in ROLES:
            raise ValueError(f"role {self.role!r} of {self.game!r} v{self.version}: expected one of {ROLES}")
        if self.agent not in AGENTS:
            raise ValueError(f"agent {self.agent!r} of {self.game!r}: expected one of {AGENTS}")
        if (self.role == "baseline") != (self.agent != "memory"):
            raise ValueError(f"role {self.role!r} with agent {self.agent!r} of {self.game!r}: "
                             "a baseline agent is logged with role 'baseline', the memory agent with another role")
        if (self.role == "specialist") != (self.adapter is not None):
            raise ValueError(f"role {self.role!r} of {self.game!r}: a specialist run names its adapter, no other run does")
        if set(self.per_seed) != set(self.seeds):
            raise ValueError(
                f"per_seed of {self.game!r} v{self.version} covers seeds {sorted(self.per_seed)}, "
                f"but the evaluation ran seeds {sorted(self.seeds)}: pass one progression per seed"
            )
        for path in [*self.plots, *self.extra_artifacts]:
            if not Path(path).is_file():
                raise FileNotFoundError(f"artifact {path} of {self.game!r} v{self.version} does not exist")

    @property
    def run_name(self) -> str:
        subject = f"v{self.version}" if self.agent == "memory" else self.agent
        subject += f"+{self.adapter}" if self.adapter else ""
        return f"{subject}-{self.role}" + (f"-{self.round_id}" if self.round_id else "")

    @property
    def verdict_tag(self) -> str | None:
        if self.verdict is None:
            return None
        return self.verdict.get("outcome") or ("kept" if self.verdict["keep"] else "rolled_back")


def specialist_model_name(family: str) -> str:
    return f"automem-{family}-specialist"


@dataclass
class TrainingRun:
    """One LoRA training of a memory specialist, as MLflow records it. Losses are ``[step, loss]``."""

    game: str
    family: str
    scaffold_version: int
    adapter: str
    base: str
    settings: dict
    settings_source: str
    """``meta-LLM`` when the meta-LLM's recommendation was used, ``default`` otherwise."""
    dataset_hash: str
    examples_train: int
    examples_validation: int
    train_loss: list[list[float]]
    validation_loss: list[list[float]]
    figures: dict[str, float]
    """``training.sft_result.FIGURES`` of the run (train_s_per_step, validation_s_per_pass, ...)."""
    adapter_dir: Path
    artifacts: list[Path] = field(default_factory=list)
    trained_on: dict = field(default_factory=dict)
    """``training.sft_result.TRAINED_ON`` of the run (device name, precision, micro-batch, ...)."""
