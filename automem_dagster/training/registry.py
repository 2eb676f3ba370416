"""Which LoRA memory specialists exist for a game family, and which one is in service.

``assets/specialists/<family>.json`` is to adapters what the lineage file is to scaffolds:
every trained adapter (``a1``, ``a2``...) with the scaffold version it was trained for, its
dataset version, files and gate decision, plus the ``champion`` pointer (None: the one-model
agent serves). The pointer moves only in ``record_verdict``, after a win on the fixed seeds, by one
atomic file replace, so a failure at any earlier point leaves the service as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.datafiles import read_json_file
from automem_dagster.locking import file_lock
from automem_dagster.paths import ASSETS

DEFAULT_ROOT = ASSETS / "specialists"


class RegistryError(ValueError):
    """A registry file that cannot be used, or a change it refuses; the message says what to do."""


@dataclass
class AdapterRecord:
    id: str
    scaffold_version: int
    dataset: str
    """The curated dataset's content hash."""
    dataset_dir: str
    adapter_dir: str
    gguf: str | None
    settings_source: str
    decision: str | None = None
    """None while pending; ``kept``, ``rolled_back`` or ``inconclusive`` after the gate."""
    reason: str | None = None
    comparison: dict | None = None
    training_run: str | None = None
    """The MLflow run id of its training, once logged: a resumed round does not log it twice."""


@dataclass
class SpecialistRegistry:
    family: str
    path: Path
    champion: str | None = None
    adapters: list[AdapterRecord] = field(default_factory=list)

    @classmethod
    def load(cls, family: str, root: Path = DEFAULT_ROOT) -> SpecialistRegistry:
        path = Path(root) / f"{family}.json"
        if not path.exists():
            return cls(family, path)
        advice = "restore it from version control (`git checkout` or `dvc checkout`)"
        data = read_json_file(path, "specialist registry", RegistryError, advice)
        try:
            return cls(family, path, data["champion"], [AdapterRecord(**a) for a in data["adapters"]])
        except (ValueError, KeyError, TypeError) as exc:
            raise RegistryError(f"{path} is not a specialist registry ({exc}): restore it from version control "
                                "(`git checkout` or `dvc checkout`)") from exc

    @classmethod
    @contextmanager
    def updating(cls, family: str, root: Path = DEFAULT_ROOT) -> Iterator[SpecialistRegistry]:
        """Load, let the caller change, and save the registry under its cross-process lock (see
        ``automem_dagster.locking``); nothing is saved when the caller raises."""
        with file_lock(Path(root) / f"{family}.json"):
            reg = cls.load(family, root)
            yield reg
            reg.save()

    def save(self) -> Path:
        write_json_atomic(self.path, {"family": self.family, "champion": self.champion,
                                      "adapters": [asdict(a) for a in self.adapters]})
        return self.path

    def next_id(self) -> str:
        return f"a{len(self.adapters) + 1}"

    def record(self, adapter_id: str) -> AdapterRecord:
        for a in self.adapters:
            if a.id == adapter_id:
                return a
        raise RegistryError(f"{self.path}: no adapter {adapter_id!r} (known: {[a.id for a in self.adapters]})")

    def pending(self) -> AdapterRecord | None:
        """An adapter trained but not yet judged: the next round evaluates it instead of training again."""
        waiting = [a for a in self.adapters if a.decision is None]
        return waiting[-1] if waiting else None

    def add(self, record: AdapterRecord) -> None:
        if any(a.id == record.id for a in self.adapters):
            raise RegistryError(f"{self.path}: adapter {record.id} is already registered")
        self.adapters.append(record)

    def mark_logged(self, adapter_id: str, run_id: str) -> None:
        self.record(adapter_id).training_run = run_id

    def record_verdict(self, adapter_id: str, keep: bool, reason: str, comparison: dict, outcome: str | None = None) -> None:
        """Record the gate's ``outcome`` (default: kept or rolled_back from ``keep``); only a keep moves the champion."""
        record = self.record(adapter_id)
        if record.decision is not None:
            raise RegistryError(f"adapter {adapter_id} was already decided ({record.decision}); train a new one")
        record.decision = outcome or ("kept" if keep else "rolled_back")
        record.reason, record.comparison = reason, comparison
        if keep:
            self.champion = adapter_id
