"""What a batch is (``RolloutSpec``: game, scaffold, seeds, budget, agent) and where it is played
(``place_batch``): never over a batch of another identity. The runner (``runner.py``) plays it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from automem_dagster.agent.baselines import AGENTS, DEFAULT_WINDOW, WINDOWED
from automem_dagster.agent.memory_settings import settings_for, settings_record
from automem_dagster.agent.sampling import sampling_record
from automem_dagster.llm.session import Clients
from automem_dagster.options import BUDGET
from automem_dagster.rollout.identity import summarize_fields, unlike_fields
from automem_dagster.rollout.trajectory import BATCH_FILE, read_manifest
from automem_dagster.scaffold import Scaffold, content_hash

log = logging.getLogger(__name__)


class BatchConflict(ValueError):
    """A directory holds a batch of another identity than the one asked for: nothing was played,
    and rerunning the same command cannot help (another directory, or deleting that one, does)."""


@dataclass
class RolloutSpec:
    """A batch. ``agent`` is ``memory`` (the scaffold's LOG + PLAN agent) or a baseline
    (``random``, ``window``, ``cot``, ``rag``, ``summary``); a baseline keeps the scaffold only to
    name the game family and the batch, and ``window`` is the history length of the windowed ones.
    ``settings`` are the ``rag`` and ``summary`` agents' own (``agent.memory_settings``): checked and
    completed with defaults here, recorded in batch.json and every trajectory header."""

    game: str
    scaffold: Scaffold
    seeds: list[int]
    max_steps: int
    out_dir: Path
    concurrency: int = BUDGET.concurrency
    agent: str = "memory"
    window: int = DEFAULT_WINDOW
    settings: dict = field(default_factory=dict)
    fixed_dir: bool = False
    """``out_dir`` was chosen by the caller (``--out``, a shard): a batch of another identity there is
    refused; otherwise it is played beside it (``place_batch``)."""

    def __post_init__(self) -> None:
        if self.agent not in AGENTS:
            raise ValueError(f"agent {self.agent!r}: expected one of {', '.join(AGENTS)}")
        if self.window < 0:
            raise ValueError(f"window {self.window}: the history length must be 0 or more steps")
        self.settings = settings_record(settings_for(self.agent, self.settings))

    def agent_settings(self) -> dict:
        """The agent as batch.json and trajectory headers record it."""
        return {"agent": self.agent, **({"window": self.window} if self.agent in WINDOWED else {}),
                **({"settings": self.settings} if self.settings else {})}

    def scaffold_hash(self) -> str:
        return content_hash(self.scaffold)

    def manifest(self, clients: Clients) -> dict:
        return {
            "game": self.game,
            "scaffold_game": self.scaffold.game,
            "scaffold_version": self.scaffold.version,
            "scaffold_hash": self.scaffold_hash(),
            "seeds": list(self.seeds),
            "max_steps": self.max_steps,
            # Only the memory agent uses a memory endpoint; a baseline plays with the game model alone.
            "two_model": self.agent == "memory" and clients.memory is not None,
            **self.agent_settings(),
            # Whether a rerun replays the batch: requests carry seeds, and what each server does with them.
            "sampling_seeds": sampling_record(clients) if self.agent != "random" else {"random": "seeded by the episode seed"},
        }


def place_batch(spec: RolloutSpec, identity: dict) -> Path:
    """Where a batch of ``identity`` is played: ``spec.out_dir`` when it is empty or holds a batch of
    that identity (reused, resumed, or grown by seeds: ``unlike_fields``), else beside it in
    ``<out_dir>-<digest>``, with a warning naming what changed; never a batch of another identity.
    A batch from before identities were recorded is unknown, so it is never reused. With
    ``spec.fixed_dir`` (a directory the user or a pipeline chose) a different batch there is refused
    instead, since the caller reads that directory."""
    out = Path(spec.out_dir)
    if not (out / BATCH_FILE).exists():
        return out
    recorded = read_manifest(out).get("identity")
    if recorded and not unlike_fields(recorded, identity):
        return out
    changed = (summarize_fields(unlike_fields(recorded, identity)) if recorded
               else "identity (unknown: the batch was played before batches recorded what played them)")
    if spec.fixed_dir:
        raise BatchConflict(f"{out} already holds a batch with a different {changed}; use another --out directory "
                           "for a different batch, or delete that one")
    beside = out.with_name(f"{out.name}-{identity['digest']}")
    if (beside / BATCH_FILE).exists() and unlike_fields(read_manifest(beside).get("identity") or {}, identity):
        raise BatchConflict(f"{beside} holds a batch of another identity than its name says: delete it and rerun")
    log.warning("%s holds a batch played with a different %s: this batch is played in %s", out, changed, beside)
    return beside
