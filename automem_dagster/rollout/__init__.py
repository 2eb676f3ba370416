"""Concurrent, resumable episode batches and their trajectory files."""

from automem_dagster.rollout.batch_spec import RolloutSpec
from automem_dagster.rollout.runner import RolloutError, run_batch, run_episode
from automem_dagster.rollout.summary import BatchSummary, EpisodeSummary, load_summary, summarize_batch
from automem_dagster.rollout.trajectory import TrajectoryError, TrajectoryWriter, episode_id, read_trajectory

__all__ = [
    "BatchSummary", "EpisodeSummary", "RolloutError", "RolloutSpec", "TrajectoryError", "TrajectoryWriter",
    "episode_id", "load_summary", "read_trajectory", "run_batch", "run_episode", "summarize_batch",
]
