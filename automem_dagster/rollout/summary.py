"""The summary of a batch, rebuilt from its trajectory files (the ground truth) and its ``batch.json``.

It carries what a gate reads of a batch: per seed, the progression and each ``GATE_METRICS`` reading;
the guards pooled over its episodes; its identity and how its requests were seeded. A decision reads
the summary alone, never ``batch.json`` or the trajectories again."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.datafiles import read_json_file
from automem_dagster.metrics import BehaviourMetrics, ProgressionSummary, behaviour_metrics, summarize_progression
from automem_dagster.metrics.behaviour import gate_reading, guard_readings
from automem_dagster.metrics.paired import GATE_METRICS
from automem_dagster.metrics.retries import RetryStats, retry_stats
from automem_dagster.rollout.trajectory import TrajectoryError, finished_episodes, read_manifest, read_trajectory

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class EpisodeSummary:
    episode: str
    seed: int
    steps: int
    progression: float
    total_reward: float
    valid_action_rate: float
    model_calls: int
    resumes: list[dict] = field(default_factory=list)
    """Where the episode was resumed after an interruption (``at_step``), or why it was played
    again from step 0 instead (``note``), as its trajectory header records."""
    gate_metrics: dict[str, float | None] = field(default_factory=dict)
    """The equal_score gate's reading of each of ``GATE_METRICS`` on this episode (``behaviour.gate_reading``;
    None where the rate has no denominator)."""


@dataclass(frozen=True)
class BatchSummary:
    out_dir: str
    game: str
    episodes: list[EpisodeSummary]
    progression: ProgressionSummary | None
    behaviour: BehaviourMetrics | None
    retries: RetryStats | None = None
    """Attempts, retries by cause and the time lost to them, apart from model latency."""
    identity: dict | None = None
    """What played the batch (``rollout.identity``, as batch.json records it); None before identities."""
    sampling_seeds: dict | None = None
    """How the batch's requests were seeded (``agent.sampling``, as batch.json records it)."""
    guards: dict[str, float] | None = None
    """``behaviour.GUARDS`` pooled over the episodes: what a cheaper scaffold may not give up."""
    unfinished: list[int] = field(default_factory=list)
    """Seeds the batch was played for (its identity) with no finished trajectory: an episode abandoned after
    its endpoint's retries, or not yet played. A gate refuses the batch while any remain (``loop.gate``)."""

    def as_dict(self) -> dict:
        return asdict(self)

    def per_seed_metric(self, metric: str) -> dict[int, float]:
        """Each episode's reading of ``metric`` (one of ``GATE_METRICS``), by seed; a seed where the rate has
        no denominator is left out."""
        readings = {e.seed: e.gate_metrics.get(metric) for e in self.episodes}
        return {seed: value for seed, value in readings.items() if value is not None}


def summarize_batch(out_dir: Path) -> BatchSummary:
    """Read every finished trajectory of a batch, write ``summary.json`` and return it."""
    summary = _summary_of(Path(out_dir))
    write_json_atomic(Path(out_dir) / SUMMARY_FILE, summary.as_dict())
    return summary


def _summary_of(out: Path) -> BatchSummary:
    """The batch in ``out``, from its batch.json and every finished trajectory."""
    manifest = read_manifest(out)
    episodes, step_lists = [], []
    for path in finished_episodes(out):
        header, steps, end = read_trajectory(path)
        step_lists.append(steps)
        valid = sum(s["action_valid"] for s in steps)
        episodes.append(EpisodeSummary(
            episode=header["episode"], seed=header["seed"], steps=len(steps),
            progression=end["progression"], total_reward=end["total_reward"],
            valid_action_rate=valid / len(steps) if steps else 0.0,
            model_calls=sum(len(s["turns"]) for s in steps), resumes=header.get("resumes", []),
            gate_metrics={metric: gate_reading(steps, metric) for metric in GATE_METRICS},
        ))
    planned = (manifest.get("identity") or {}).get("seeds") or []
    return BatchSummary(
        out_dir=str(out), game=manifest["game"], episodes=episodes,
        progression=summarize_progression([e.progression for e in episodes]) if episodes else None,
        behaviour=behaviour_metrics(step_lists) if episodes else None,
        retries=retry_stats(step_lists) if episodes else None,
        identity=manifest.get("identity"), sampling_seeds=manifest.get("sampling_seeds"),
        guards=guard_readings(step_lists) if episodes else None,
        unfinished=sorted(set(planned) - {e.seed for e in episodes}),
    )


def load_summary(out_dir: Path) -> BatchSummary:
    """The batch's ``summary.json`` read back as written, for readers that must not rewrite a finished
    batch; rebuilt in memory from the trajectories where it is absent or written before summaries
    carried what the gate reads (``identity``)."""
    path = Path(out_dir) / SUMMARY_FILE
    if not path.exists():
        return summarize_batch(out_dir)
    data = read_json_file(path, "batch summary", TrajectoryError,
                          "delete summary.json: it is rebuilt from the trajectories, which stay as they are")
    if "identity" not in data:
        return replace(_summary_of(Path(out_dir)), out_dir=data["out_dir"])
    return BatchSummary(
        out_dir=data["out_dir"], game=data["game"], episodes=[EpisodeSummary(**e) for e in data["episodes"]],
        progression=ProgressionSummary(**data["progression"]) if data["progression"] else None,
        behaviour=BehaviourMetrics(**data["behaviour"]) if data["behaviour"] else None,
        retries=RetryStats(**data["retries"]) if data.get("retries") else None,
        identity=data["identity"], sampling_seeds=data.get("sampling_seeds"), guards=data.get("guards"),
        unfinished=data.get("unfinished", []),
    )
