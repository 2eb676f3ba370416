"""The lineage of scaffold versions of one game family, and which version is the champion.

Stored as data at ``assets/lineage/<game>.json``: one record per version (its parent, the
diagnosis that caused it, the paired evaluation and the keep-or-rollback decision) and the
champion pointer that every later rollout and evaluation starts from. The pointer decides
what runs next, so the file is only ever replaced whole (temp file, then ``os.replace``)
and validated on load; a broken file stops the loop with a message instead of silently
falling back to v0.

The in-memory ``Lineage`` is changed by ``record_candidate``, ``record_verdict`` and
``promote``, and written by ``save``; nothing touches the disk before ``save``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from automem_dagster.atomic import write_text_atomic
from automem_dagster.datafiles import read_text_file, validation_problems
from automem_dagster.locking import file_lock
from automem_dagster.paired_comparison import PairedComparison
from automem_dagster.paths import ASSETS, SCAFFOLDS
from automem_dagster.scaffold.io import content_hash, list_versions, load_scaffold, scaffold_path, stored_scaffold_path
from automem_dagster.scaffold.model import Family, registered_family

DEFAULT_ROOT = ASSETS / "lineage"

VerdictName = Literal["kept", "rolled_back", "inconclusive", "rejected", "baseline"]


class LineageError(ValueError):
    """A lineage file or operation that cannot be used; the message says what to do."""


class _PersistedComparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @classmethod
    def from_comparison(cls, comparison: PairedComparison) -> Evaluation:
        return cls.model_validate(dataclasses.asdict(comparison))


def _comparison_fields() -> dict:
    """``PairedComparison``'s fields as pydantic fields, so the persisted form follows the dataclass:
    seeds stay a JSON list, and ``n`` and ``p_value`` (absent from lineage files written before
    they were recorded) are optional."""
    hints = get_type_hints(PairedComparison)
    fields = {}
    for f in dataclasses.fields(PairedComparison):
        kind = list[int] if f.name == "seeds" else hints[f.name]
        if f.default is not dataclasses.MISSING:
            fields[f.name] = (kind, f.default)
        else:
            fields[f.name] = (kind | None, None) if f.name == "n" else (kind, ...)
    return fields


Evaluation = create_model("Evaluation", __base__=_PersistedComparison, __module__=__name__,
                          __doc__="The paired comparison that decided a version, in percent: the persisted form of "
                                  "``paired_comparison.PairedComparison`` (validated when a lineage file is read back).",
                          **_comparison_fields())


class VerdictFields(Protocol):
    """What ``record_verdict`` reads of a gate's decision (``metrics.verdict.Verdict``):
    whether it keeps the candidate, why, and on what comparison. Named here so that the lineage does not
    import the metrics package (which imports the agent, which imports this package)."""

    outcome: str
    """kept, rolled_back or inconclusive (``metrics.paired.OUTCOMES``)."""
    reason: str
    comparison: PairedComparison


class VersionRecord(BaseModel):
    """One scaffold version: where it came from and what became of it (``decision`` None = pending)."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=0)
    parent: int | None
    content_hash: str = Field(min_length=1)
    diagnosis: str | None
    created_at: datetime
    evaluation: Evaluation | None = None
    decision: VerdictName | None = None
    reason: str = ""


class ChampionPointer(BaseModel):
    """The version every rollout and evaluation of ``game`` starts from, and since when."""

    model_config = ConfigDict(extra="forbid")

    game: Family
    version: int = Field(ge=0)
    since: datetime
    content_hash: str = Field(min_length=1)


class LineageFile(BaseModel):
    """The whole file; the validators reject any state the API could not have produced."""

    model_config = ConfigDict(extra="forbid")

    game: Family
    champion: ChampionPointer
    versions: list[VersionRecord] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> LineageFile:
        known = {r.version for r in self.versions}
        if len(known) != len(self.versions):
            raise ValueError("versions: a version is recorded twice")
        for r in self.versions:
            if r.parent is not None and (r.parent not in known or r.parent >= r.version):
                raise ValueError(f"versions: v{r.version} names parent {r.parent}, which is not an earlier recorded version")
        champ = next((r for r in self.versions if r.version == self.champion.version), None)
        if self.champion.game != self.game:
            raise ValueError(f"champion: game {self.champion.game!r} in the lineage of {self.game!r}")
        if champ is None or champ.decision not in ("kept", "baseline"):
            raise ValueError(f"champion: v{self.champion.version} is not a kept or baseline version of this lineage")
        if champ.content_hash != self.champion.content_hash:
            raise ValueError(f"champion: content hash {self.champion.content_hash} differs from v{champ.version}'s record")
        return self


class Lineage:
    """The lineage of one game family, loaded from and saved to ``<root>/<game>.json``."""

    def __init__(self, data: LineageFile, path: Path, scaffolds: Path) -> None:
        self._data = data
        self.path = path
        self.scaffolds = scaffolds

    @classmethod
    def load(cls, game: str, root: Path = DEFAULT_ROOT, scaffolds: Path = SCAFFOLDS) -> Lineage:
        """Read ``<root>/<game>.json``; without it, v0 (from ``scaffolds``) is the champion as baseline."""
        try:
            registered_family(game)
        except ValueError as exc:
            raise LineageError(f"{exc}: lineages are kept per family") from None
        path = Path(root) / f"{game}.json"
        if not path.exists() and not path.is_symlink():
            return cls(_baseline(game, Path(scaffolds)), path, Path(scaffolds))
        return cls(_read(path, game), path, Path(scaffolds))

    @classmethod
    @contextmanager
    def updating(cls, game: str, root: Path = DEFAULT_ROOT, scaffolds: Path = SCAFFOLDS) -> Iterator[Lineage]:
        """Load, let the caller change, and save the lineage under its cross-process lock, so two rounds
        changing it at once both keep their change; nothing is saved when the caller raises."""
        with file_lock(Path(root) / f"{game}.json"):
            lineage = cls.load(game, root, scaffolds)
            yield lineage
            lineage.save()

    @property
    def game(self) -> str:
        return self._data.game

    @property
    def versions(self) -> list[VersionRecord]:
        """All records, oldest version first (copies: change them through the methods)."""
        return [r.model_copy(deep=True) for r in sorted(self._data.versions, key=lambda r: r.version)]

    def record(self, version: int) -> VersionRecord:
        return self._find(version).model_copy(deep=True)

    def champion(self) -> ChampionPointer:
        return self._data.champion.model_copy()

    def next_version(self) -> int:
        """One above every version known, from the scaffold files or the lineage, so a number
        is never reused even when a scaffold file was written but not yet recorded."""
        on_disk = list_versions(self.game, self.scaffolds)
        return max([*on_disk, *(r.version for r in self._data.versions)]) + 1

    def record_candidate(self, version: int, parent: int, content_hash: str,
                         diagnosis: Path | str | None) -> VersionRecord:
        """Add a pending version; its ``parent`` must already be in the lineage."""
        if any(r.version == version for r in self._data.versions):
            raise LineageError(f"{self.game} v{version} is already in the lineage: use next_version() for a new one")
        if parent >= version:
            raise LineageError(f"{self.game} v{version} cannot descend from v{parent}: a parent is an earlier version")
        self._find(parent)
        record = VersionRecord(version=version, parent=parent, content_hash=content_hash,
                               diagnosis=None if diagnosis is None else str(diagnosis), created_at=_now())
        self._data.versions.append(record)
        return record.model_copy(deep=True)

    def record_verdict(self, version: int, decision: VerdictFields | str) -> VersionRecord:
        """Record a pending version's fate: the gate's ``Verdict`` on the paired evaluation (kept or
        rolled back, with its statistics), or a string, the reason it was rejected unevaluated."""
        record = self._find(version)
        if record.decision is not None:
            raise LineageError(f"{self.game} v{version} was already decided ({record.decision}): a decision is final")
        if isinstance(decision, str):
            if not decision.strip():
                raise LineageError(f"{self.game} v{version}: a rejection needs a reason")
            record.decision, record.reason = "rejected", decision
        else:
            record.evaluation = Evaluation.from_comparison(decision.comparison)
            record.decision = decision.outcome
            record.reason = decision.reason
        return record.model_copy(deep=True)

    def promote(self, version: int) -> ChampionPointer:
        """Make a kept version the champion. Promoting the current champion again changes
        nothing, so a retried promotion step is harmless."""
        record = self._find(version)
        if record.decision != "kept":
            raise LineageError(f"{self.game} v{version} cannot be promoted: its decision is "
                               f"{record.decision or 'pending'}, and only a kept version may become champion")
        if self._data.champion.version != version:
            self._data.champion = ChampionPointer(game=self._data.game, version=version, since=_now(),
                                                  content_hash=record.content_hash)
        return self.champion()

    def save(self) -> Path:
        """Write the whole lineage to a temp file beside the target, then rename it over the
        target: a failure at any point leaves the previous file (and its champion) intact."""
        return write_text_atomic(self.path, self._data.model_dump_json(indent=2) + "\n")

    def _find(self, version: int) -> VersionRecord:
        for r in self._data.versions:
            if r.version == version:
                return r
        raise LineageError(f"{self.game} v{version} is not in the lineage {self.path}: record it as a candidate first")


def render_tree(lineage: Lineage) -> str:
    """The versions as an indented tree, each with its decision, scores and the champion marked."""
    records = lineage.versions
    children: dict[int | None, list[VersionRecord]] = {}
    for r in records:
        children.setdefault(r.parent, []).append(r)
    champion = lineage.champion().version
    lines = [f"{lineage.game} lineage (champion v{champion})"]

    def walk(parent: int | None, prefix: str) -> None:
        kids = children.get(parent, [])
        for i, r in enumerate(kids):
            last = i == len(kids) - 1
            lines.append(f"{prefix}{'└── ' if last else '├── '}{_describe(r, r.version == champion)}")
            walk(r.version, prefix + ("    " if last else "│   "))

    walk(None, "")
    return "\n".join(lines)


def _describe(record: VersionRecord, is_champion: bool) -> str:
    status = record.decision or "pending"
    if record.decision == "rejected":
        status += f" ({record.reason})"
    parts = [f"v{record.version}", status]
    e = record.evaluation
    if e is not None:
        parts.append(f"{e.candidate_mean:.1f}% vs {e.champion_mean:.1f}% "
                     f"({e.mean_difference:+.1f} ± {e.stderr_difference:.1f}, n={len(e.seeds)})")
    if is_champion:
        parts.append("[champion]")
    return "  ".join(parts)


def _read(path: Path, game: str) -> LineageFile:
    advice = (f"restore it from version control (git/dvc checkout {path}); deleting it restarts the lineage "
              f"from v0 as champion and loses the recorded history")
    try:
        data = LineageFile.model_validate_json(read_text_file(path, "lineage file", LineageError, advice))
    except ValidationError as exc:
        raise LineageError(f"lineage file {path} is corrupted ({validation_problems(exc)}): {advice}") from exc
    if data.game != game:
        raise LineageError(f"lineage file {path} holds the lineage of {data.game!r}, not {game!r}: {advice}")
    return data


def _baseline(game: str, scaffolds: Path) -> LineageFile:
    """A fresh lineage: v0 is the champion, by definition rather than by evaluation."""
    if not stored_scaffold_path(game, 0, scaffolds).exists():
        raise LineageError(f"no lineage file for {game} and no {scaffold_path(game, 0, scaffolds)} to start from: "
                           f"create the v0 scaffold first")
    now = _now()
    digest = content_hash(load_scaffold(game, 0, scaffolds))
    v0 = VersionRecord(version=0, parent=None, content_hash=digest, diagnosis=None, created_at=now,
                       decision="baseline", reason="the starting scaffold; champion until a revision beats it")
    champion = ChampionPointer(game=game, version=0, since=now, content_hash=digest)
    return LineageFile(game=game, champion=champion, versions=[v0])


def _now() -> datetime:
    return datetime.now(UTC)
