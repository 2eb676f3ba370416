"""The evaluation both loops share: a scaffold (or a baseline agent) played on the fixed evaluation
seeds, in a folder named by what was played, so one champion batch serves every challenger of it.

A structure round's candidate and a proficiency round's one-model champion are both such batches;
``automem evaluate`` and the paper table play them too.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from automem_dagster.agent.baselines import DEFAULT_WINDOW
from automem_dagster.llm.session import Clients
from automem_dagster.loop.noise import NoiseRecord, load_noise, measure_noise, replay_spec
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import Storage, batch_dir
from automem_dagster.options import BUDGET
from automem_dagster.rollout import BatchSummary, RolloutSpec, run_batch
from automem_dagster.rollout.runner import BatchProgress, Progress
from automem_dagster.rollout.summary import load_summary
from automem_dagster.rollout.trajectory import BATCH_FILE
from automem_dagster.scaffold import Scaffold


async def evaluate_stage(game: str, scaffold: Scaffold, seeds: list[int], max_steps: int, clients: Clients,
                         storage: Storage, concurrency: int = BUDGET.concurrency, progress: Progress | None = None,
                         out: Path | None = None, agent: str = "memory", window: int = DEFAULT_WINDOW,
                         settings: dict | None = None) -> BatchSummary:
    """Play ``scaffold`` (or the baseline ``agent``) on the evaluation ``seeds`` (``evaluation_batch``)."""
    spec = evaluation_batch(game, scaffold, seeds, max_steps, storage, concurrency, out, agent, window, settings)
    return await run_batch(spec, clients, progress)


def evaluation_batch(game: str, scaffold: Scaffold, seeds: list[int], max_steps: int, storage: Storage,
                     concurrency: int = BUDGET.concurrency, out: Path | None = None, agent: str = "memory",
                     window: int = DEFAULT_WINDOW, settings: dict | None = None) -> RolloutSpec:
    """The evaluation batch of ``scaffold`` (or the baseline ``agent``) on ``seeds``, in a directory named
    by them; a batch already played there is reused, so the champion is evaluated once per seed set
    and step budget, not once per round, while it is played by the same models (``rollout.identity``).
    An ``out`` given by the caller is fixed: a batch of another identity there is refused, not played beside."""
    fixed = out is not None
    out = out or batch_dir(storage.runs, "evaluations", game, scaffold.version, seeds, max_steps, agent, window, settings)
    return RolloutSpec(game, scaffold, seeds, max_steps, out, concurrency, agent=agent, window=window,
                       settings=settings or {}, fixed_dir=fixed)


def evaluation_spec(settings: StructureConfig, scaffold: Scaffold, storage: Storage) -> RolloutSpec:
    """``scaffold``'s ``evaluation_batch`` on the round's evaluation seeds and step budget."""
    return evaluation_batch(settings.game, scaffold, settings.eval_seed_list(storage.seeds_file),
                            settings.budget.eval_max_steps, storage, settings.budget.concurrency)


def stored_noise(spec: RolloutSpec, storage: Storage) -> NoiseRecord | None:
    """The A/A record of the batch played in ``spec``'s folder, where one is played and measured."""
    if not (Path(spec.out_dir) / BATCH_FILE).exists():
        return None
    played = load_summary(Path(spec.out_dir))  # its identity too: batch.json is read once
    return load_noise(storage, played) if played.identity else None


def champion_arms(champion: RolloutSpec, tag: str, storage: Storage) -> dict[str, RolloutSpec]:
    """The champion's batches a round plays beside its challenger (``tag`` names the challenger), by arm:
    ``champion_replay``, a fresh play of the champion, unless the identity's A/A replays were bit-identical
    (then the ``champion`` batch is reused); and where no A/A was measured for the identity yet, the
    ``champion`` batch too, so the round measures the floor from the two plays (``loop.noise``) at the
    cost of one more champion batch on the round's seeds and steps."""
    noise = stored_noise(champion, storage)
    if noise is not None and noise.bit_identical:
        return {"champion": champion}
    replay = replay_spec(champion, tag)
    return {"champion_replay": replay} if noise is not None else {"champion": champion, "champion_replay": replay}


async def play_interleaved(arms: list[tuple[RolloutSpec, Clients]],
                           progress: Progress | BatchProgress | None = None) -> list[BatchSummary]:
    """Play batches on the same seeds side by side: each chunk of ``concurrency`` seeds is played by every
    arm at once before the next chunk starts, so a candidate and its champion meet the same server state
    (load, caches, drift) episode by episode rather than one batch after the other. Each arm is played
    with its own clients (a one-model champion beside a two-model agent) and has one progress bar;
    returns the arms' summaries."""
    seeds = arms[0][0].seeds
    width = max(1, min(spec.concurrency for spec, _ in arms))
    def bar(spec: RolloutSpec) -> Progress | None:
        if not isinstance(progress, BatchProgress):
            return progress
        replay = " replay" if "-replay-" in Path(spec.out_dir).name else ""
        return progress.batch(f"{spec.game} v{spec.scaffold.version}{replay}", len(spec.seeds), spec.max_steps)

    bars = [bar(spec) for spec, _ in arms]
    for start in range(0, len(seeds), width):
        chunk = seeds[start:start + width]
        await asyncio.gather(*(run_batch(replace(spec, seeds=chunk), clients, bar)
                               for (spec, clients), bar in zip(arms, bars, strict=True)))
    return [await run_batch(spec, clients) for spec, clients in arms]  # the whole seed list's batch.json


async def play_beside_champion(challenger: tuple[RolloutSpec, Clients], champion: tuple[RolloutSpec, Clients], tag: str,
                               storage: Storage, progress: Progress | BatchProgress | None = None,
                               ) -> tuple[BatchSummary, BatchSummary]:
    """A challenger's evaluation in one process (DVC's evaluate stages): the challenger played side by side
    with the champion's arms (``champion_arms``, ``tag`` naming the challenger), each arm with its own
    clients; returns the challenger's batch and the champion batch its decision pairs with it
    (``round_champion``, which measures the A/A where none is stored). Dagster's rounds play the same arms
    in seed shards and merge them through ``round_champion`` too."""
    spec, clients = champion
    arms = champion_arms(spec, tag, storage)
    played = await play_interleaved([challenger, *((arm, clients) for arm in arms.values())], progress)
    return played[0], round_champion(dict(zip(arms, played[1:], strict=True)), storage)


def round_champion(batches: dict[str, BatchSummary], storage: Storage) -> BatchSummary:
    """The champion batch a round's decision pairs with its challenger, from the round's merged arms
    (``champion_arms``): the replay where one was played, else the reused batch. Where the round played
    both and no A/A is stored for the identity, the two plays are the A/A evaluation and its record is
    written first (``loop.noise.measure_noise``), so the decision quotes the floor they measured; when
    the replay proved bit-identical the first play is the champion's batch, as every later round of the
    identity reuses it (one batch, logged once)."""
    first, replay = batches.get("champion"), batches.get("champion_replay")
    if first is not None and replay is not None and load_noise(storage, first) is None:
        if measure_noise(first, replay, storage).bit_identical:
            return first
    return replay or first


def champion_plan(arms: dict[str, RolloutSpec]) -> str:
    """What a round's plan says of its champion arms (``champion_arms``) and what they cost."""
    spec = next(iter(arms.values()))
    batch = f"{len(spec.seeds)} seeds x {spec.max_steps} steps"
    if "champion_replay" not in arms:
        return "the champion batch is reused: this identity's A/A replays were bit-identical"
    if "champion" in arms:
        return (f"the champion is replayed beside the challenger ({batch}); no noise floor is stored for its identity, "
                "so its evaluation batch (played now unless reused) and the replay measure it: the A/A costs "
                f"at most one more champion batch of {batch}")
    return f"the champion is replayed beside the challenger ({batch}): its identity's A/A replays were not bit-identical"
