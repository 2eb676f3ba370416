"""Each loop's ``Ledger`` (``loop.challenger``): the file holding its challengers' fates and its champion
pointer, open under its lock for the one step a verdict takes. The structure loop's is the lineage (a
kept candidate becomes the champion scaffold), the proficiency loop's the specialist registry (a kept
adapter serves the memory role). ``LEDGERS`` opens the one of a challenger's role."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

from automem_dagster.games import game_family
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.storage import Storage
from automem_dagster.metrics.verdict import Verdict
from automem_dagster.scaffold.lineage import Lineage
from automem_dagster.training.registry import SpecialistRegistry


class LineageLedger:
    """The structure loop's ledger: the family's lineage, whose champion a kept candidate becomes."""

    role = "candidate"

    def __init__(self, lineage: Lineage) -> None:
        self.lineage = lineage

    def champion(self) -> int:
        return self.lineage.champion().version

    def scaffold_version(self, challenger: int) -> int:
        return challenger

    def earlier(self, challenger: int) -> None:
        """Refuses a candidate already decided, or one that is not a child of the current champion."""
        record, family, champion = self.lineage.record(challenger), self.lineage.game, self.champion()
        if record.decision is not None:
            raise RoundError(f"{family} v{challenger} was already decided ({record.decision}); start a new round")
        if record.parent != champion:
            raise RoundError(f"{family} v{challenger} descends from v{record.parent}, but the champion is now "
                             f"v{champion}: evaluate a revision of the current champion instead")

    def settle(self, challenger: int, verdict: Verdict) -> None:
        self.lineage.record_verdict(challenger, verdict)
        if verdict.keep:
            self.lineage.promote(challenger)


@contextmanager
def lineage_ledger(storage: Storage, game: str) -> Iterator[LineageLedger]:
    with storage.update_lineage(game_family(game)) as lineage:
        yield LineageLedger(lineage)


class RegistryLedger:
    """The proficiency loop's ledger: the family's specialist registry, whose pointer names the adapter
    in service (None: the one-model agent)."""

    role = "specialist"

    def __init__(self, registry: SpecialistRegistry) -> None:
        self.registry = registry

    def champion(self) -> str | None:
        return self.registry.champion

    def scaffold_version(self, challenger: str) -> int:
        return self.registry.record(challenger).scaffold_version

    def earlier(self, challenger: str) -> dict | None:
        """A decision the registry holds (the process died before its file was written) is written again."""
        record = self.registry.record(challenger)
        if record.decision is None:
            return None
        keep = record.decision == "kept"
        return {"champion_before": None if keep else self.registry.champion, "keep": keep, "reason": record.reason,
                "comparison": record.comparison, "inconclusive": record.decision == "inconclusive"}

    def settle(self, challenger: str, verdict: Verdict) -> None:
        self.registry.record_verdict(challenger, verdict.keep, verdict.reason, asdict(verdict.comparison),
                                      verdict.outcome)


@contextmanager
def registry_ledger(storage: Storage, game: str) -> Iterator[RegistryLedger]:
    with SpecialistRegistry.updating(game_family(game), storage.specialists) as reg:
        yield RegistryLedger(reg)


LEDGERS = {"candidate": lineage_ledger, "specialist": registry_ledger}
"""Per challenger role, how its loop's ledger is opened."""
