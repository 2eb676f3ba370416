"""How a loop's config is written, and the budget every command plays on.

A loop's config (``loop/settings.py``) is a frozen pydantic model of nested parts; each leaf field is an
option with its one default and help (``option``). This module walks the parts (``leaves``) so that the CLI
flags (``commands/shared.add_options``), the Dagster run config (``defs/common/config.py``) and ``params.yaml``
(``automem params``) are generated from the model, never restated. It imports nothing of the project, so
that any layer may read ``BUDGET``'s defaults (the rollout runner's concurrency, say) without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, get_args

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo


def option(default, description: str, flag: str | None = None, param: str | None = None,
           choices: tuple[str, ...] | None = None, **bounds):
    """A config option: its default and help, the CLI ``flag`` it gets when its name does not give it, the
    ``params.yaml`` key (``section.key``) the DVC pipeline reads it from, if any, and the values it takes
    (a plain ``str`` for Dagster's config schema, which has no ``Literal``; the part's validator checks them)."""
    extra = {k: v for k, v in (("flag", flag), ("param", param), ("choices", choices)) if v is not None}
    return Field(default, description=description, json_schema_extra=extra or None, **bounds)


class Part(BaseModel):
    """A frozen part of a loop's config. ``flag_prefix`` starts the flags of its options (``gate`` ->
    ``--gate-level``) where their names alone would not say which part they set."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    flag_prefix: ClassVar[str] = ""


def is_part(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, Part)


@dataclass(frozen=True)
class Leaf:
    """One option of a config: its ``path`` through the parts (``("gate", "level")``), field and CLI flag."""

    path: tuple[str, ...]
    field: FieldInfo
    flag: str

    @property
    def key(self) -> str:
        """The option's name in commands and errors: its path, dotted (``gate.level``)."""
        return ".".join(self.path)

    @property
    def dest(self) -> str:
        """Where argparse keeps the flag's value."""
        return self.flag[2:].replace("-", "_")

    @property
    def param(self) -> str | None:
        return (self.field.json_schema_extra or {}).get("param")

    @property
    def kind(self) -> type:
        """The option's type, without ``None``."""
        return next((k for k in get_args(self.field.annotation) if k is not type(None)), self.field.annotation)

    @property
    def optional(self) -> bool:
        return type(None) in get_args(self.field.annotation)


def leaves(model: type[BaseModel], path: tuple[str, ...] = (), prefix: str = "") -> dict[str, Leaf]:
    """Every option of ``model``, parts walked in order, by key (``budget.rollout_episodes``)."""
    found: dict[str, Leaf] = {}
    for name, field in model.model_fields.items():
        if is_part(field.annotation):
            found.update(leaves(field.annotation, (*path, name), field.annotation.flag_prefix))
            continue
        flag = (field.json_schema_extra or {}).get("flag") or "--" + "-".join(filter(None, (prefix, name))).replace("_", "-")
        leaf = Leaf((*path, name), field, flag)
        found[leaf.key] = leaf
    return found


def select(model: type[BaseModel], names: tuple[str, ...] | None = None) -> list[Leaf]:
    """The options ``names`` of ``model``: each a leaf's key or a part's (all its options); None: every one."""
    every = leaves(model)
    if names is None:
        return list(every.values())
    chosen = [leaf for name in names for key, leaf in every.items() if key == name or key.startswith(name + ".")]
    unknown = [name for name in names if not any(leaf.key == name or leaf.key.startswith(name + ".") for leaf in chosen)]
    if unknown:
        raise KeyError(f"{model.__name__} has no option {', '.join(unknown)}")
    return chosen


def nest(values: dict[str, object]) -> dict:
    """``{"gate.level": 0.1}`` -> ``{"gate": {"level": 0.1}}``: option values as a config model reads them."""
    nested: dict = {}
    for key, value in values.items():
        *parts, name = key.split(".")
        where = nested
        for part in parts:
            where = where.setdefault(part, {})
        where[name] = value
    return nested


def value_at(config: BaseModel, leaf: Leaf):
    for name in leaf.path:
        config = getattr(config, name)
    return config


class Budget(Part):
    """What a round plays: training rollouts, then the evaluation. Small local defaults, the round the embedded
    135M model on a CPU plays in minutes: raise them for a real round (AutoMem used full seed sets and
    50-step evaluations)."""

    rollout_episodes: int = option(2, "training-seed episodes the round plays for its diagnosis (or curation)",
                                   param="rollout.episodes", ge=1)
    rollout_max_steps: int = option(10, "steps per training-seed episode", param="rollout.max_steps", ge=1)
    eval_max_steps: int = option(10, "steps per evaluation episode", param="evaluate.max_steps", ge=1)
    eval_episodes: int | None = option(2, "the first k evaluation seeds of assets/seeds; empty (null): the whole "
                                          "fixed set", param="evaluate.episodes", ge=1)
    concurrency: int = option(2, "episodes played at once (per shard)", ge=1)
    max_attempts: int = option(3, "meta-LLM attempts per diagnosis or revision", "--attempts", ge=1)


BUDGET = Budget()
"""The default budget, for code that takes one budget number without a config (a stage's concurrency)."""
