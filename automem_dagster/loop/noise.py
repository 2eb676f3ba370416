"""The measured noise floor of a game and batch identity: an A/A evaluation, stored beside the lineage.

An A/A evaluation plays the champion's evaluation batch and then a fresh replay of it (same scaffold,
seeds, step budget and endpoints, so the same batch identity, ``rollout.identity``) and compares the
two the way a gate compares a candidate with the champion (``metrics.noise``). Its record lives in
``assets/noise/<game>/<identity digest>.json`` (``Storage.noise``), so every later decision whose
champion batch has that identity quotes the floor, and a gain inside it is never kept.

The record also says whether the replay was bit-identical: every step's observation, action, reward,
progression and every model turn's text, operations and token counts the same on every seed (timings
aside). Only then may a round reuse the champion's batch instead of playing the champion again beside
the candidate (``champion_replayed``); anything else, a server that ignores sampling seeds included,
means one play of the champion is one draw, not the bar.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.gate import per_seed
from automem_dagster.loop.storage import Storage, slug
from automem_dagster.metrics.noise import noise_floor
from automem_dagster.metrics.paired import GATE_METRICS
from automem_dagster.rollout import BatchSummary, RolloutSpec
from automem_dagster.rollout.trajectory import finished_episodes, read_trajectory

STEP_KEYS = ("observation", "action", "action_valid", "reward", "progression", "done")
TURN_KEYS = ("phase", "text", "ops", "errors", "input_tokens", "output_tokens")
"""What a bit-identical replay repeats: each step's and each model turn's content, never its timings."""


@dataclass
class NoiseRecord:
    """One A/A evaluation: the floor in points (``metrics.noise``), per gate metric the metric's floor,
    whether the replay repeated every episode exactly, and what it cost."""

    game: str
    identity: str
    """The batch identity digest both plays share (``rollout.identity``)."""
    first_batch: str
    replay_batch: str
    points: float
    comparison: dict
    bit_identical: bool
    differing_seeds: list[int]
    metric_floors: dict[str, float] = field(default_factory=dict)
    cost: dict = field(default_factory=dict)
    """What the replay played: ``episodes`` and ``steps`` (the first play is the champion's own batch)."""
    measured_at: str = ""

    def basis(self) -> str:
        """What the floor rests on, as a decision quotes it: one A/A pair, a bootstrap over its seeds."""
        same = "bit-identical replays" if self.bit_identical else f"replays differed on seeds {self.differing_seeds}"
        return f"one A/A pair, bootstrap over its {self.comparison['n']} seeds, {same}"

    def describe(self) -> str:
        c = self.comparison
        return (f"noise floor {self.points:.2f} points ({self.basis()}): the champion replayed scored "
                f"{c['candidate_mean']:.2f}% against {c['champion_mean']:.2f}% on the same {c['n']} seeds, identity "
                f"{self.identity[:12]}")


def noise_path(storage: Storage, game: str, identity: str) -> Path:
    return storage.noise / slug(game) / f"{identity}.json"


def identity_digest(batch: BatchSummary) -> str | None:
    """The digest of the identity ``batch`` recorded; None for a batch from before identities."""
    identity = batch.identity
    return identity.get("digest") if identity else None


def load_noise(storage: Storage, batch: BatchSummary) -> NoiseRecord | None:
    """The A/A record of ``batch``'s game and identity, or None where none was measured."""
    digest = identity_digest(batch)
    path = noise_path(storage, batch.game, digest) if digest else None
    if path is None or not path.exists():
        return None
    return NoiseRecord(**json.loads(path.read_text()))


def replay_spec(spec: RolloutSpec, tag: str) -> RolloutSpec:
    """A fresh replay of ``spec``'s batch in a folder of its own (``<batch>-replay-<tag>``): the same
    identity, played again rather than read back."""
    return replace(spec, out_dir=Path(f"{spec.out_dir}-replay-{tag}"), fixed_dir=False)


def differing_seeds(first: Path, replay: Path) -> list[int]:
    """The seeds whose episodes the replay did not repeat exactly (``STEP_KEYS``, ``TURN_KEYS``)."""
    def content(batch: Path) -> dict[int, list]:
        episodes = {}
        for path in finished_episodes(Path(batch)):
            header, steps, end = read_trajectory(path)
            episodes[header["seed"]] = [([s.get(k) for k in STEP_KEYS],
                                         [[t.get(k) for k in TURN_KEYS] for t in s.get("turns", [])]) for s in steps]
        return episodes

    a, b = content(first), content(replay)
    return sorted(s for s in set(a) | set(b) if a.get(s) != b.get(s))


def measure_noise(first: BatchSummary, replay: BatchSummary, storage: Storage) -> NoiseRecord:
    """The A/A record of two plays of the same batch identity, written where ``load_noise`` reads it.
    Refuses two batches of different identities (not an A/A pair) or seeds."""
    digest, other = identity_digest(first), identity_digest(replay)
    if digest is None or digest != other:
        raise RoundError(f"{first.out_dir} and {replay.out_dir} are not plays of one batch identity ({digest} vs "
                         f"{other}): an A/A evaluation replays the same batch with the same endpoints")
    a, b = per_seed(first), per_seed(replay)
    if set(a) != set(b):
        raise RoundError(f"the A/A plays cover seeds {sorted(a)} and {sorted(b)}: finish both batches")
    floor = noise_floor(a, b)
    metrics = {}
    for name in GATE_METRICS:
        m_first, m_replay = first.per_seed_metric(name), replay.per_seed_metric(name)
        if set(m_first) == set(m_replay) == set(a):
            metrics[name] = noise_floor(a, b, m_first, m_replay).metric
    differ = differing_seeds(Path(first.out_dir), Path(replay.out_dir))
    record = NoiseRecord(first.game, digest, first.out_dir, replay.out_dir, floor.points,
                         {**asdict(floor.comparison), "seeds": list(floor.comparison.seeds)},
                         not differ, differ, metrics,
                         {"episodes": len(replay.episodes), "steps": sum(e.steps for e in replay.episodes)},
                         datetime.now(UTC).isoformat(timespec="seconds"))
    write_json_atomic(noise_path(storage, first.game, digest), asdict(record))
    return record



def champion_play(champion: BatchSummary, noise: NoiseRecord | None) -> str:
    """How a decision's champion batch was played: replayed beside the challenger, or reused (allowed
    only where the identity's A/A replays were bit-identical)."""
    if "-replay-" in Path(champion.out_dir).name:
        return f"replayed beside the challenger ({champion.out_dir})"
    if noise is not None and noise.bit_identical:
        return "batch reused: this identity's A/A replays were bit-identical"
    return "batch reused without a bit-identical A/A replay of its identity, so its score is one draw"


def noise_evidence(noise: NoiseRecord | None, champion: BatchSummary, storage: Storage) -> dict:
    """What a decision record keeps of the noise floor it was taken under and of its champion's play."""
    if noise is None:
        digest = identity_digest(champion)
        said = (f"noise floor not measured for this identity ({(digest or 'unknown')[:12]}): "
                f"`automem noise --game {champion.game}` measures it")
        return {"floor": None, "summary": said, "champion_play": champion_play(champion, None)}
    return {"floor": noise.points, "metric_floors": noise.metric_floors, "bit_identical": noise.bit_identical,
            "basis": noise.basis(),
            "identity": noise.identity, "record": str(noise_path(storage, noise.game, noise.identity)),
            "summary": noise.describe(), "champion_play": champion_play(champion, noise)}


def gate_floors(noise: NoiseRecord | None, metric: str | None) -> dict:
    """The floors a gate reads from an A/A record, as ``paired_verdict``/``verdict_of_scores`` keywords: the
    progression floor and the floor of the gate's ``metric``; empty (not measured) without a record."""
    if noise is None:
        return {}
    return {"floor": noise.points, "metric_floor": noise.metric_floors.get(metric) if metric else None,
            "floor_basis": noise.basis()}
