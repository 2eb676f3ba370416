"""The summary of a batch, rebuilt from its trajectory files (the ground truth)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.datafiles import read_json_file
from automem_dagster.metrics import BehaviourMetrics, ProgressionSummary, behaviour_metrics, summarize_progression
from automem_dagster.metrics.retries import RetryStats, retry_stats
from automem_dagster.rollout.trajectory import TrajectoryError, finished_episodes, read_manifest, read_trajectory


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


@dataclass(frozen=True)
class BatchSummary:
    out_dir: str
    game: str
    episodes: list[EpisodeSummary]
    progression: ProgressionSummary | None
    behaviour: BehaviourMetrics | None
    retries: RetryStats | None = None
    """Attempts, retries by cause and the time lost to them, apart from model latency."""

    def as_dict(self) -> dict:
        return asdict(self)


def summarize_batch(out_dir: Path) -> BatchSummary:
    """Read every finished trajectory of a batch, write ``summary.json`` and return it."""
    out = Path(out_dir)
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
        ))
    summary = BatchSummary(
        out_dir=str(out), game=manifest["game"], episodes=episodes,
        progression=summarize_progression([e.progression for e in episodes]) if episodes else None,
        behaviour=behaviour_metrics(step_lists) if episodes else None,
        retries=retry_stats(step_lists) if episodes else None,
    )
    write_json_atomic(out / "summary.json", summary.as_dict())
    return summary


def load_summary(out_dir: Path) -> BatchSummary:
    """The batch's ``summary.json`` read back as written (rebuilt from the trajectories if absent),
    for readers that must not rewrite a finished batch."""
    path = Path(out_dir) / "summary.json"
    if not path.exists():
        return summarize_batch(out_dir)
    data = read_json_file(path, "batch summary", TrajectoryError,
                          "delete summary.json: it is rebuilt from the trajectories, which stay as they are")
    return BatchSummary(
        out_dir=data["out_dir"], game=data["game"], episodes=[EpisodeSummary(**e) for e in data["episodes"]],
        progression=ProgressionSummary(**data["progression"]) if data["progression"] else None,
        behaviour=BehaviourMetrics(**data["behaviour"]) if data["behaviour"] else None,
        retries=RetryStats(**data["retries"]) if data.get("retries") else None,
    )

