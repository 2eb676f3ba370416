"""The scaffold: everything about how the agent uses memory, as one validated document.

A scaffold version is data (a YAML file), not a copy of the harness: prompts, the memory
files and their policies, which operations exist, the routine caps, the derived signals and
the memory routine (when LOG runs, when a consultation is reused).
The building blocks it switches on (keyed upsert, pruning, synced files, warnings) are
implemented once, in ``memory`` and ``agent``. The structure loop edits this model, so
every rule a revision must obey is checked here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from automem_dagster.memory.ops import OpName
from automem_dagster.memory.policy import FilePolicy

MODEL_OPS = tuple(op for op in OpName if op is not OpName.DONE)
"""Operations a scaffold can enable; DONE is always available to end a LOG turn."""


def registered_family(family: str) -> str:
    """A scaffold, lineage or run belongs to a registered environment family (``games.plugin``)."""
    from automem_dagster.games.plugin import families  # late: the registry imports plugins

    if family not in families():
        raise ValueError(f"unknown game family {family!r}: registered are {', '.join(families())}")
    return family


Family = Annotated[str, AfterValidator(registered_family)]


class MemoryFile(BaseModel):
    """One file in the agent's memory: what it is for, what it starts with, how it may change."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    purpose: str = Field(min_length=1, max_length=300)
    initial: str = Field("", max_length=20_000)
    policy: FilePolicy = Field(default_factory=FilePolicy)


class Limits(BaseModel):
    """Routine caps. Operations per phase bound the work per step; text bounds keep every
    free-text field of a constrained turn finite (an unbounded rule lets small models loop)."""

    model_config = ConfigDict(extra="forbid")

    log_max_ops: int = Field(5, ge=0, le=20)
    log_min_writes: int = Field(0, ge=0, le=20, description="writes a LOG turn must make before DONE (a constrained "
                                "turn cannot end sooner): a model that ends every LOG at once writes something")
    plan_max_ops: int = Field(2, ge=0, le=20)
    plan_min_reads: int = Field(0, ge=0, le=20, description="reads a consultation must make before it ends (a "
                                "constrained turn cannot end sooner) while a memory file has content: a model that "
                                "ends every consultation at once never shows the actor what it noted")
    history_length: int = Field(10, ge=0, le=100)
    text_max_chars: int = Field(64, ge=8, le=400)
    key_max_chars: int = Field(24, ge=2, le=64)
    keyword_max_chars: int = Field(24, ge=2, le=64)

    @model_validator(mode="after")
    def _minimums_fit(self) -> Limits:
        if self.log_min_writes > self.log_max_ops:
            raise ValueError(f"limits.log_min_writes {self.log_min_writes} exceeds log_max_ops {self.log_max_ops}: "
                             "a LOG turn cannot make more writes than its cap")
        if self.plan_min_reads > self.plan_max_ops:
            raise ValueError(f"limits.plan_min_reads {self.plan_min_reads} exceeds plan_max_ops {self.plan_max_ops}: "
                             "a consultation cannot make more reads than its cap")
        return self


class StuckSignal(BaseModel):
    """Warn when the observation has not changed for ``repeats`` consecutive steps."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    repeats: int = Field(3, ge=2, le=50)


class OscillationSignal(BaseModel):
    """Warn on ``reversals`` or more direction reversals among the last ``window`` moves."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    reversals: int = Field(3, ge=1, le=50)
    window: int = Field(10, ge=2, le=100)


class Signals(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stuck: StuckSignal = Field(default_factory=StuckSignal)
    oscillation: OscillationSignal = Field(default_factory=OscillationSignal)


LogTrigger = Literal["reward", "inventory", "level", "position"]
"""What of the previous step makes a LOG due at once: a reward other than 0, or a change of the
inventory, the level (achievements, depth) or the position (``agent.signals.progress_fingerprint``)."""


class Routine(BaseModel):
    """When the memory agent asks the model for memory decisions at all (``agent/savings.py``).

    LOG and the consultation are the only places a memory decision can be made, so these rules
    decide which decisions exist: they are the scaffold's, for a structure round to revise, and
    a batch played under other rules has another scaffold hash. The defaults are the rules every
    shipped v0 states."""

    model_config = ConfigDict(extra="forbid")

    log_every: int = Field(5, ge=1, le=100)
    """At most this many steps pass without a LOG (1: a LOG at every step after the first)."""
    log_triggers: list[LogTrigger] = Field(default_factory=lambda: ["reward", "inventory", "level"], max_length=4)
    """Events of the previous step that make a LOG due before ``log_every`` steps have passed."""
    reuse_consultation: bool = True
    """Show the last consultation again, without a call, while the memory files are unchanged since it."""

    @field_validator("log_triggers")
    @classmethod
    def _distinct(cls, triggers: list[str]) -> list[str]:
        if len(set(triggers)) != len(triggers):
            raise ValueError("lists a trigger twice")
        return triggers


class Scaffold(BaseModel):
    """One version of the memory scaffold for one game family."""

    model_config = ConfigDict(extra="forbid")

    game: Family
    version: int = Field(ge=0)
    parent: int | None = None
    description: str = ""
    log_prompt: str = Field(min_length=20, max_length=6_000)
    plan_prompt: str = Field(min_length=20, max_length=6_000)
    files: list[MemoryFile] = Field(min_length=1, max_length=24)
    operations: list[OpName]
    limits: Limits = Field(default_factory=Limits)
    signals: Signals = Field(default_factory=Signals)
    routine: Routine = Field(default_factory=Routine)

    @field_validator("operations")
    @classmethod
    def _known_ops(cls, ops: list[OpName]) -> list[OpName]:
        if OpName.DONE in ops:
            raise ValueError("DONE is always enabled; list only the memory operations")
        if len(set(ops)) != len(ops):
            raise ValueError("operations lists an operation twice")
        if OpName.READ not in ops:
            raise ValueError("READ must be enabled: a memory the agent cannot read is not a memory")
        return ops

    @model_validator(mode="after")
    def _consistent(self) -> Scaffold:
        names = [f.name for f in self.files]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"files: duplicate file names {dupes}")
        if self.parent is not None and self.parent >= self.version:
            raise ValueError(f"parent: version {self.version} cannot descend from version {self.parent}")
        writes = {OpName.APPEND, OpName.WRITE, OpName.UPSERT} & set(self.operations)
        if not writes:
            raise ValueError("operations: enable at least one of APPEND, WRITE, UPSERT so the model can record")
        for f in self.files:
            if f.policy.mode == "keyed" and OpName.UPSERT not in self.operations:
                raise ValueError(f"files.{f.name}.policy: a keyed file needs the UPSERT operation enabled")
            if f.policy.mode == "append_only" and OpName.APPEND not in self.operations:
                raise ValueError(f"files.{f.name}.policy: an append-only file needs the APPEND operation enabled")
        return self

    def file(self, name: str) -> MemoryFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(f"scaffold {self.game} v{self.version} has no file {name!r}")

    def model_writable_files(self) -> list[str]:
        """Files the model may change: reference and synced files are the harness's."""
        return [f.name for f in self.files if f.policy.mode not in ("reference", "synced")]
