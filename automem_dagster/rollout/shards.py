"""Seed shards: one batch played as several independent pieces, then merged into the batch.

A shard is an ordinary batch (its own ``batch.json``, trajectories and memory stores) under
``<batch>/shards/<index>/`` holding a slice of the batch's seeds, so it resumes the way any batch
does and needs nothing from the other shards: Dagster (or any scheduler) can run the shards in
separate processes or pods that share only the batch directory. ``merge_shards`` moves the
finished episodes into the batch directory and writes the batch's own ``batch.json`` and
``summary.json``, after which the batch is what one process playing every seed would have left.
Moving, not copying, keeps one copy of each trajectory; a shard rerun after the merge finds its
episodes in the batch and plays nothing.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.llm.session import Clients
from automem_dagster.rollout.batch_spec import BatchConflict, RolloutSpec
from automem_dagster.rollout.identity import (
    batch_identity,
    embedded_batch_identity,
    merged_identity,
    summarize_fields,
    unlike_fields,
)
from automem_dagster.rollout.runner import Progress, RolloutError, run_batch
from automem_dagster.rollout.summary import BatchSummary, summarize_batch
from automem_dagster.rollout.trajectory import BATCH_FILE, episode_id, read_manifest, trajectory_path
from automem_dagster.scaffold import load_scaffold

SHARDS_DIR = "shards"


def plan_shards(seeds: list[int], shard_size: int | None = None, shard_count: int | None = None) -> list[list[int]]:
    """Split ``seeds`` into consecutive shards of ``shard_size`` seeds, or into ``shard_count``
    shards as even as possible; exactly one of the two must be given. The plan depends only on
    the seeds and the setting, so every process that plans it gets the same shards."""
    if (shard_size is None) == (shard_count is None):
        raise ValueError("give either a shard size or a shard count (not both): e.g. shard_size=8 or shard_count=4")
    if not seeds:
        raise ValueError("a batch without seeds has nothing to shard")
    if shard_size is not None:
        if shard_size < 1:
            raise ValueError(f"shard size {shard_size}: use 1 or more seeds per shard")
        return [seeds[i:i + shard_size] for i in range(0, len(seeds), shard_size)]
    assert shard_count is not None
    if shard_count < 1:
        raise ValueError(f"shard count {shard_count}: use 1 or more shards")
    count = min(shard_count, len(seeds))
    base, extra = divmod(len(seeds), count)
    shards, start = [], 0
    for index in range(count):
        size = base + (1 if index < extra else 0)
        shards.append(seeds[start:start + size])
        start += size
    return shards


def spec_record(spec: RolloutSpec) -> dict:
    """``spec`` as plain data for a shard step in another process: the scaffold by family and
    version (every scaffold a round plays is saved in the project's scaffolds folder first)."""
    return {"game": spec.game, "family": spec.scaffold.game, "version": spec.scaffold.version, "seeds": list(spec.seeds),
            "max_steps": spec.max_steps, "out_dir": str(spec.out_dir), "concurrency": spec.concurrency,
            "agent": spec.agent, "window": spec.window, "settings": spec.settings}


def spec_from_record(record: dict, scaffolds: Path) -> RolloutSpec:
    """The spec ``spec_record`` wrote, with its scaffold loaded from ``scaffolds``."""
    scaffold = load_scaffold(record["family"], record["version"], scaffolds)
    return RolloutSpec(record["game"], scaffold, record["seeds"], record["max_steps"], Path(record["out_dir"]),
                       record["concurrency"], record["agent"], record["window"], record.get("settings", {}))


def shard_dir(batch_dir: Path, index: int) -> Path:
    return Path(batch_dir) / SHARDS_DIR / f"{index:03d}"


def _unmerged(spec: RolloutSpec, seeds: list[int]) -> list[int]:
    return [s for s in seeds if not trajectory_path(spec.out_dir, episode_id(spec.game, s)).exists()]


async def run_shard(spec: RolloutSpec, index: int, seeds: list[int], clients: Clients,
                    progress: Progress | None = None) -> BatchSummary | None:
    """Play shard ``index`` (``seeds``, a slice of ``spec.seeds``) in its own directory.

    Seeds whose episodes were already merged into the batch are not played again; returns the
    shard's summary, or None when the whole shard was merged before."""
    unknown = sorted(set(seeds) - set(spec.seeds))
    if unknown:
        raise ValueError(f"shard {index} holds seeds {unknown} that the batch in {spec.out_dir} does not have")
    await _check_batch_identity(spec, seeds, clients)
    todo = _unmerged(spec, seeds)
    if not todo:
        return None
    shard = replace(spec, seeds=todo, out_dir=shard_dir(spec.out_dir, index), fixed_dir=True)
    return await run_batch(shard, clients, progress)


def played_without_server(spec: RolloutSpec, seeds: list[int], configs: dict, lora: list[Path]) -> bool:
    """Whether shard ``seeds`` of ``spec`` are all merged into a batch that the embedded endpoints
    ``configs`` (per playing role, as the session would connect them) played with the settings they
    have now, ``lora`` the adapters the server would load. Such a shard has nothing to play and its
    identity check needs no server (``embedded_batch_identity``), so its step need not start one: a
    rerun of a finished round costs no model start. False leaves the shard to the usual path, which
    connects, checks the identity against the servers (refusing a batch other settings played) and
    plays what is left."""
    batch = Path(spec.out_dir)
    if not (batch / BATCH_FILE).exists() or _unmerged(spec, seeds):
        return False
    recorded = read_manifest(batch).get("identity")
    if not recorded:
        return False
    mine = embedded_batch_identity(replace(spec, seeds=seeds), configs, lora, recorded)
    return mine is not None and not unlike_fields(recorded, mine)


async def _check_batch_identity(spec: RolloutSpec, seeds: list[int], clients: Clients) -> None:
    """Refuse to add to (or count as played) a merged batch that other models or worlds played."""
    batch = Path(spec.out_dir)
    if not (batch / BATCH_FILE).exists():
        return
    recorded = read_manifest(batch).get("identity")
    mine = await batch_identity(replace(spec, seeds=seeds), clients)
    if recorded is None:
        changed = ["identity (unknown: the batch was played before batches recorded what played them)"]
    else:
        changed = unlike_fields(recorded, mine)
    if changed:
        raise BatchConflict(f"{batch} holds a batch played with a different {summarize_fields(changed)}: delete it "
                           "to play the batch with these settings, or restore the ones it was played with")


def _move_episode(shard: Path, batch: Path, episode: str) -> None:
    source = trajectory_path(shard, episode)
    target = trajectory_path(batch, episode)
    target.parent.mkdir(parents=True, exist_ok=True)
    memory = shard / "memory" / episode
    if memory.exists():
        destination = batch / "memory" / episode
        shutil.rmtree(destination, ignore_errors=True)   # an unfinished one-process attempt's store
        destination.parent.mkdir(parents=True, exist_ok=True)
        memory.rename(destination)
    # The trajectory moves last: its presence in the batch is what says the episode was merged.
    source.rename(target)


def merge_shards(spec: RolloutSpec, shards: list[list[int]]) -> BatchSummary:
    """Move every shard's finished episodes into the batch and summarise the whole batch.

    Refuses, naming the shards to rerun, when an episode is in neither the batch nor its shard,
    and when a shard was played with other settings than the batch (another scaffold, step
    budget or endpoint set)."""
    batch = Path(spec.out_dir)
    planned = [s for shard in shards for s in shard]
    if sorted(planned) != sorted(spec.seeds):
        raise ValueError(f"the shards hold seeds {sorted(planned)}, the batch {sorted(spec.seeds)}: plan them again")
    existing = batch / BATCH_FILE
    manifest, missing = (read_manifest(batch) if existing.exists() else None), {}
    found = [manifest["identity"]] if manifest and manifest.get("identity") else []
    for index in range(len(shards)):  # every shard checked before any episode moves
        if (shard_dir(batch, index) / BATCH_FILE).exists():
            shard_manifest = read_manifest(shard_dir(batch, index))
            manifest = _agreeing_manifest(manifest, shard_manifest, index)
            found += [shard_manifest["identity"]] if shard_manifest.get("identity") else []
    try:
        identities = {"identity": merged_identity(found, list(spec.seeds))} if found else {}
    except ValueError as exc:
        raise RolloutError(f"{batch}: {exc}; delete the shards played with other settings and rerun them") from exc
    for index, seeds in enumerate(shards):
        directory = shard_dir(batch, index)
        for seed in _unmerged(spec, seeds):
            episode = episode_id(spec.game, seed)
            if trajectory_path(directory, episode).exists():
                _move_episode(directory, batch, episode)
            else:
                missing.setdefault(index, []).append(seed)
    if missing:
        listed = "; ".join(f"shard {i} (seeds {seeds})" for i, seeds in missing.items())
        raise RolloutError(f"{sum(map(len, missing.values()))} episodes of {batch} are not finished: rerun {listed}")
    if manifest is not None:
        write_json_atomic(batch / BATCH_FILE, {**manifest, "seeds": list(spec.seeds), **identities})
    for index in range(len(shards)):
        shutil.rmtree(shard_dir(batch, index), ignore_errors=True)
    shards_root = batch / SHARDS_DIR
    if shards_root.exists() and not any(shards_root.iterdir()):
        shards_root.rmdir()
    return summarize_batch(batch)


def _agreeing_manifest(merged: dict | None, shard: dict, index: int) -> dict:
    """The batch's manifest so far, checked against one more shard's (seeds aside)."""
    if merged is None:
        return shard
    differing = sorted(k for k in set(merged) | set(shard)
                       if k not in ("seeds", "identity") and merged.get(k) != shard.get(k))
    if differing:
        raise RolloutError(f"shard {index} was played with other {', '.join(differing)} than the shards before it: "
                           f"delete its directory and rerun it with the batch's settings")
    return merged
