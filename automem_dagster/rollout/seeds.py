"""Which seeds an episode may use: fixed evaluation sets, and a separate training range.

Keep-or-rollback is only fair if candidate and champion play the same seeds, and only
honest if no scaffold or adapter was shaped on those seeds. So the evaluation sets are data
(``assets/seeds/eval.yaml``), the training range is declared next to them, and loading the
file refuses a training range that contains any evaluation seed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from automem_dagster.datafiles import load_yaml_model
from automem_dagster.games import EnvRef, as_ref, minihack_env_id, minihack_suite_tasks
from automem_dagster.games.minihack_suite import suite_units
from automem_dagster.paths import ASSETS

DEFAULT_SEEDS_FILE = ASSETS / "seeds" / "eval.yaml"


class SeedConfigError(ValueError):
    """A seed file that cannot be used; the message names the file and the problem."""


class TrainingRange(BaseModel):
    """Inclusive range ``first..last`` that training rollouts draw their seeds from."""

    model_config = ConfigDict(extra="forbid")

    first: int = Field(ge=0)
    last: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> TrainingRange:
        if self.last < self.first:
            raise ValueError(f"training range {self.first}..{self.last} is empty: last must be >= first")
        return self

    def seeds(self) -> range:
        return range(self.first, self.last + 1)


class SeedConfig(BaseModel):
    """The evaluation seed sets of game families (MiniHack: per task) and the training range.

    A family without a set here plays its environment record's ``eval_seeds`` (``eval_seeds``); a built-in
    family's record has none (``games/builtin.FROM_SEED_FILE``): this file is the one list of its set."""

    model_config = ConfigDict(extra="forbid")

    eval: dict[str, list[int]]
    training: TrainingRange

    @model_validator(mode="after")
    def _sound(self) -> SeedConfig:
        for family, seeds in self.eval.items():
            if not seeds or len(set(seeds)) != len(seeds):
                raise ValueError(f"eval.{family}: give at least one seed and no seed twice")
            assert_disjoint(self.training.seeds(), seeds, "training range", f"eval.{family}")
        return self


def load_seed_config(path: Path = DEFAULT_SEEDS_FILE) -> SeedConfig:
    """Read and validate a seed file; errors name the file and the offending field."""
    return load_yaml_model(path, SeedConfig, "seed file", SeedConfigError, "restore assets/seeds/eval.yaml")


def eval_seeds(game: str | EnvRef, path: Path = DEFAULT_SEEDS_FILE) -> list[int]:
    """The fixed evaluation seeds for ``game`` ("crafter", "minihack:<Task>", a plugin's game): the seed
    file's set of its family, else its environment record's, which must stay out of the training range too.
    A MiniHack suite ("minihack:suite") plays every task on the family's set: its seeds are the units that
    stand for each (task, seed) (``games.minihack_suite``), so the gate pairs tasks x seeds."""
    ref, config = as_ref(game), load_seed_config(path)
    seeds = list(config.eval.get(ref.family) or ref.plugin.eval_seeds)
    if not seeds:  # a built-in family's set is only in the seed file (games/builtin.FROM_SEED_FILE)
        raise SeedConfigError(f"seed file {path}: no eval.{ref.family} set, and the {ref.family} family has no seeds of "
                              "its own; restore assets/seeds/eval.yaml or add the set")
    suite = minihack_suite_tasks(ref.task) if ref.family == "minihack" else None
    if suite is not None:
        units = suite_units(len(suite), seeds)
        assert_disjoint(config.training.seeds(), units, f"training range of {path}", f"the units of {ref.name}")
        return units
    if ref.family not in config.eval:
        assert_disjoint(config.training.seeds(), seeds, f"training range of {path}", f"eval_seeds of plugin {ref.family!r}")
    return seeds


def training_seeds(game: str | EnvRef, n: int, offset: int = 0, path: Path = DEFAULT_SEEDS_FILE) -> list[int]:
    """``n`` distinct training seeds for ``game``: items ``offset .. offset+n-1`` of a fixed shuffle.

    The shuffle of the training range is seeded from a SHA-256 of the game's canonical name
    (Python's ``hash`` is salted per process), so every process draws the same seeds, the
    spellings of one MiniHack task share one stream, and consecutive offsets never repeat a
    seed: ``training_seeds(g, 10) + training_seeds(g, 10, offset=10) == training_seeds(g, 20)``.
    """
    if n < 0 or offset < 0:
        raise ValueError(f"n and offset must be >= 0, got n={n}, offset={offset}")
    pool = load_seed_config(path).training.seeds()
    if offset + n > len(pool):
        raise ValueError(f"asked for training seeds {offset}..{offset + n - 1} of {game!r}, "
                         f"but the training range {pool.start}..{pool.stop - 1} holds only {len(pool)}")
    rng = np.random.default_rng(_stable_seed(_stream_name(game)))
    order = rng.permutation(len(pool))[offset:offset + n]
    return [pool.start + int(i) for i in order]


def assert_disjoint(a: Iterable[int], b: Iterable[int], a_name: str = "training seeds",
                    b_name: str = "evaluation seeds") -> None:
    """Raise if two seed collections share a seed: a training episode on an evaluation seed
    would let a scaffold or adapter be shaped on the very episodes that judge it. A range (the seed file's
    training range, 99,000 seeds) is asked by membership, not made into a set: that set took 40 ms per seed file read."""
    within = a if isinstance(a, range) else set(a)
    shared = sorted({seed for seed in b if seed in within})
    if shared:
        raise ValueError(f"{a_name} and {b_name} share seeds {shared}: keep training and evaluation seeds disjoint")


def _stream_name(game: str | EnvRef) -> str:
    """One name per game, whichever spelling was given ("MiniHack-Corridor-R3-v0" = "minihack:Corridor-R3").

    A MiniHack task's stream keeps the gym-id name it had before games were references, so the
    training seeds drawn for a task stay the ones already drawn."""
    ref = as_ref(game)
    return minihack_env_id(ref.name) if ref.family == "minihack" else ref.name


def _stable_seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
