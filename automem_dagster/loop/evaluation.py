"""The evaluation both loops share: a scaffold (or a baseline agent) played on the fixed evaluation
seeds, in a folder named by what was played, so one champion batch serves every challenger of it.

A structure round's candidate and a proficiency round's one-model champion are both such batches;
``automem evaluate`` and the paper table play them too.
"""

from __future__ import annotations

from pathlib import Path

from automem_dagster.agent.baselines import DEFAULT_WINDOW
from automem_dagster.llm.session import Clients
from automem_dagster.loop.settings import RoundSettings
from automem_dagster.loop.storage import Storage, batch_dir
from automem_dagster.rollout import BatchSummary, RolloutSpec, run_batch
from automem_dagster.rollout.runner import Progress
from automem_dagster.scaffold import Scaffold


async def evaluate_stage(game: str, scaffold: Scaffold, seeds: list[int], max_steps: int, clients: Clients,
                         storage: Storage, concurrency: int = 2, progress: Progress | None = None,
                         out: Path | None = None, agent: str = "memory", window: int = DEFAULT_WINDOW,
                         settings: dict | None = None) -> BatchSummary:
    """Play ``scaffold`` (or the baseline ``agent``) on the evaluation ``seeds`` (``evaluation_batch``)."""
    spec = evaluation_batch(game, scaffold, seeds, max_steps, storage, concurrency, out, agent, window, settings)
    return await run_batch(spec, clients, progress)


def evaluation_batch(game: str, scaffold: Scaffold, seeds: list[int], max_steps: int, storage: Storage,
                     concurrency: int = 2, out: Path | None = None, agent: str = "memory",
                     window: int = DEFAULT_WINDOW, settings: dict | None = None) -> RolloutSpec:
    """The evaluation batch of ``scaffold`` (or the baseline ``agent``) on ``seeds``, in a directory named
    by them; a batch already played there is reused, so the champion is evaluated once per seed set
    and step budget, not once per round, while it is played by the same models (``rollout.identity``).
    An ``out`` given by the caller is fixed: a batch of another identity there is refused, not played beside."""
    fixed = out is not None
    out = out or batch_dir(storage.runs, "evaluations", game, scaffold.version, seeds, max_steps, agent, window, settings)
    return RolloutSpec(game, scaffold, seeds, max_steps, out, concurrency, agent=agent, window=window,
                       settings=settings or {}, fixed_dir=fixed)


def evaluation_spec(settings: RoundSettings, scaffold: Scaffold, storage: Storage) -> RolloutSpec:
    """``scaffold``'s ``evaluation_batch`` on the round's evaluation seeds and step budget."""
    return evaluation_batch(settings.game, scaffold, settings.eval_seed_list(storage.seeds_file),
                            settings.eval_max_steps, storage, settings.concurrency)
