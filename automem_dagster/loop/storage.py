"""Where the loops read and write: the project's folders, the batch layout under ``runs/``, and
the scaffold a round plays (the champion, a version, or a file)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from automem_dagster.agent.baselines import DEFAULT_WINDOW, WINDOWED
from automem_dagster.agent.memory_settings import settings_for
from automem_dagster.games import game_family
from automem_dagster.paths import ASSETS, RUNS, SCAFFOLDS
from automem_dagster.rollout.seeds import DEFAULT_SEEDS_FILE
from automem_dagster.scaffold import Scaffold, load_scaffold, load_scaffold_file
from automem_dagster.scaffold.lineage import DEFAULT_ROOT as LINEAGE_ROOT
from automem_dagster.scaffold.lineage import Lineage
from automem_dagster.training.registry import DEFAULT_ROOT as SPECIALISTS_ROOT


@dataclass(frozen=True)
class Storage:
    """Where a round reads and writes: generated outputs, scaffold versions, the lineage, the
    specialist registry of the proficiency loop."""

    runs: Path = RUNS
    scaffolds: Path = SCAFFOLDS
    lineage: Path = LINEAGE_ROOT
    seeds_file: Path = DEFAULT_SEEDS_FILE
    specialists: Path = SPECIALISTS_ROOT

    @classmethod
    def under(cls, home: Path) -> Storage:
        """The layout of a project home (``$AUTOMEM_HOME``): ``assets/`` with scaffolds, lineages,
        seed sets and the specialist registry, and ``runs/`` beside it."""
        assets = Path(home) / "assets"
        return cls(runs=Path(home) / "runs", scaffolds=assets / "scaffolds", lineage=assets / "lineage",
                   seeds_file=assets / "seeds" / "eval.yaml", specialists=assets / "specialists")

    @property
    def noise(self) -> Path:
        """The measured noise floors (``loop.noise``), one file per game and batch identity, beside the lineage."""
        return self.lineage.parent / "noise"

    def load_lineage(self, family: str) -> Lineage:
        return Lineage.load(family, self.lineage, self.scaffolds)

    def update_lineage(self, family: str):
        """``with storage.update_lineage(family) as lineage:`` change it under its cross-process lock."""
        return Lineage.updating(family, self.lineage, self.scaffolds)


def fresh_project_home(home: Path, assets: Path = ASSETS) -> Storage:
    """A project home at ``home`` whose ``assets/`` is a fresh copy of ``assets`` (the checkout's, by
    default): what a round writes there (candidate versions, the lineage's champion pointer, adapters)
    stays out of the project's own versioned files. Its ``runs/`` is kept from an earlier start, so
    batches played there before are reused under the same identity (``rollout/identity.py``)."""
    home = Path(home)
    if home.resolve() == Path(assets).resolve().parent:
        raise ValueError(f"{home} is the project whose assets it would copy: give a separate folder")
    shutil.rmtree(home / "assets", ignore_errors=True)
    shutil.copytree(assets, home / "assets")
    return Storage.under(home)


def slug(game: str) -> str:
    """A game name usable as one path component (``minihack:Corridor-R3`` -> ``minihack-Corridor-R3``)."""
    return game.replace(":", "-")


def batch_dir(root: Path, kind: str, game: str, version: int, seeds: list[int], max_steps: int,
              agent: str = "memory", window: int = DEFAULT_WINDOW, settings: dict | None = None) -> Path:
    """The directory of a batch, determined by its settings, so the same settings resume it.

    A memory-agent batch sits under its scaffold version (``.../v3/...``); a baseline, which
    uses no scaffold, under its own name (``.../random/...``, ``.../window/...-window8``), and a memory
    baseline's settings name it too (``.../rag/...-window8-bm25-k4-oao``, ``.../summary/...-every8-cap128``)."""
    name = f"steps{max_steps}-seeds{seeds[0]}-{seeds[-1]}-n{len(seeds)}"
    if agent == "memory":
        return Path(root) / kind / slug(game) / f"v{version}" / name
    name += f"-window{window}" if agent in WINDOWED else ""
    own = settings_for(agent, settings)
    return Path(root) / kind / slug(game) / agent / (name + (f"-{own.slug()}" if own is not None else ""))


def load_champion(family: str, storage: Storage) -> Scaffold:
    """The champion scaffold of ``family`` (the lineage's pointer)."""
    champion = storage.load_lineage(family).champion()
    return load_scaffold(family, champion.version, storage.scaffolds)


def resolve_scaffold(game: str, ref: str, storage: Storage) -> Scaffold:
    """``champion``, ``v<N>``/``<N>`` or a path to a scaffold YAML file."""
    family = game_family(game)
    if ref == "champion":
        return load_champion(family, storage)
    if ref.removeprefix("v").isdigit():
        return load_scaffold(family, ref, storage.scaffolds)
    return load_scaffold_file(Path(ref))
