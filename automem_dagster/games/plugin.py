"""The environment plugin contract: what a game must provide, how one is found, and the reference to it.

An environment is registered as an ``Environment`` record: its family name (the key of its
scaffolds, lineage, seeds and tracking), a factory that builds a ``Game`` for a task, a v0
scaffold, fixed evaluation seeds and a one-paragraph goal. The project's own five are listed in
``automem_dagster.games.builtin``; a third-party package adds one through the entry point group
``automem_dagster.environments`` (the entry point names the family and points at the record), so
``pip install my-env`` makes ``--game my-env:task`` work without a change here.

A game name is resolved once into an ``EnvRef`` (canonical name, family, task, plugin); every
part of the project that needs the family, the seeds or a game asks the reference, not the string.
Loading checks the record and every game it builds, and names what is missing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from automem_dagster.games.base import Game
from automem_dagster.games.registration import Environment

ENTRY_POINT_GROUP = "automem_dagster.environments"

log = logging.getLogger(__name__)

FAMILY_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
"""A family is a path component and a Dagster partition key part: lower case, no ':' or '/'."""

GAME_ATTRIBUTES = ("name", "max_steps", "default_action", "packages")
GAME_METHODS = ("actions", "parse_action", "reset", "step", "world_fingerprint", "close")
"""What every game must have (``games.base.Game``); ``validate_game`` names the missing ones."""


class PluginError(ValueError):
    """An environment plugin that cannot be used; the message names the plugin and what it lacks."""


@dataclass(frozen=True)
class EnvRef:
    """A resolved game name: made once by ``env_ref``, it carries the name, family, task and plugin."""

    name: str
    family: str
    task: str
    plugin: Environment

    def make(self, max_steps: int | None = None) -> Game:
        """A fresh game of this task, checked against the contract."""
        game = self.plugin.make(self.task, max_steps)
        validate_game(game, f"environment {self.family!r}")
        return game

    def __str__(self) -> str:
        return self.name


def validate_environment(env: object, source: str) -> Environment:
    """``env`` as a checked ``Environment``; a PluginError names ``source`` and every fault."""
    if not isinstance(env, Environment):
        raise PluginError(f"{source}: expected an automem_dagster.games.plugin.Environment, got {type(env).__name__}")
    faults = []
    if not FAMILY_PATTERN.match(env.family):
        faults.append(f"family {env.family!r} must be lower case letters, digits, '_' or '-' (at most 32)")
    if not callable(env.make):
        faults.append("make is not callable (it builds a Game from (task, max_steps))")
    if not Path(env.scaffold).is_file():
        faults.append(f"scaffold {env.scaffold} is not a file (the family's v0 scaffold YAML)")
    if not env.eval_seeds or len(set(env.eval_seeds)) != len(env.eval_seeds) or any(
            not isinstance(s, int) or s < 0 for s in env.eval_seeds):
        faults.append("eval_seeds must be at least one distinct non-negative int")
    if not env.goal.strip():
        faults.append("goal is empty (the baselines' system prompt starts with it)")
    if any(not t or ":" in t for t in env.tasks):
        faults.append(f"tasks {env.tasks} must be non-empty names without ':'")
    if faults:
        raise PluginError(f"{source}: " + "; ".join(faults))
    return env


def validate_game(game: object, source: str) -> None:
    """Raise a PluginError naming each member of the ``Game`` contract ``game`` lacks."""
    missing = [a for a in GAME_ATTRIBUTES if not hasattr(game, a)]
    missing += [f"{m}()" for m in GAME_METHODS if not callable(getattr(game, m, None))]
    if missing:
        raise PluginError(f"{source}: its game {type(game).__name__} lacks {', '.join(missing)} "
                          "(see docs/environments.md for the contract)")
    if not isinstance(game.packages, tuple) or not all(isinstance(p, str) for p in game.packages):
        raise PluginError(f"{source}: packages must be a tuple of distribution names, got {game.packages!r}")


@lru_cache(maxsize=1)
def _registry() -> tuple[dict[str, Environment], dict[str, PluginError]]:
    """The built-in families, then the entry points of installed packages; a plugin that fails its
    checks is kept aside with its error, so it breaks only the games of its own family."""
    from automem_dagster.games.builtin import BUILTIN

    found, broken = {env.family: env for env in BUILTIN}, {}
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            env = _load(point)
        except PluginError as exc:
            broken[point.name] = exc
            log.warning("%s", exc)
            continue
        if env.family in found:
            broken[point.name] = PluginError(f"environment plugin {point.name!r} ({point.value}): family "
                                             f"{env.family!r} is already registered; pick another name")
            continue
        found[env.family] = env
    return found, broken


def _load(point: metadata.EntryPoint) -> Environment:
    source = f"environment plugin {point.name!r} ({point.value}, entry point group {ENTRY_POINT_GROUP})"
    try:
        loaded = point.load()
    except Exception as exc:  # a broken third-party import must name the plugin, not crash later
        raise PluginError(f"{source}: cannot be imported: {type(exc).__name__}: {exc}") from exc
    env = validate_environment(loaded() if callable(loaded) and not isinstance(loaded, Environment) else loaded, source)
    if env.family != point.name:
        raise PluginError(f"{source}: the entry point is named {point.name!r} but the environment's family is "
                          f"{env.family!r}; name the entry point after the family")
    return env


def environments() -> dict[str, Environment]:
    """Every usable registered family, built-in first (a broken plugin is left out, see ``environment``)."""
    return _registry()[0]


def families() -> tuple[str, ...]:
    """The registered family names, built-in first."""
    return tuple(environments())


def environment(family: str) -> Environment:
    """The registered environment of ``family``; an unknown one names the registered ones."""
    try:
        return environments()[family]
    except KeyError:
        if family in _registry()[1]:
            raise _registry()[1][family] from None
        raise PluginError(f"unknown game family {family!r}: registered are {', '.join(families())} "
                          f"(install a plugin that registers it in {ENTRY_POINT_GROUP})") from None


@lru_cache(maxsize=256)
def env_ref(name: str) -> EnvRef:
    """Resolve a game name (``family`` or ``family:task``) into its reference, once per name."""
    key = name.strip()
    for env in environments().values():
        claimed = env.canonical(key) if env.canonical else None
        if claimed is not None:
            key = claimed
            break
    family, _, task = key.partition(":")
    env = environments().get(family.lower())
    if env is None and family.lower() in _registry()[1]:
        raise _registry()[1][family.lower()]
    if env is None:
        raise PluginError(f"unknown game {name!r}: use one of {', '.join(choices())}, "
                          f"or install a plugin that registers the family in {ENTRY_POINT_GROUP}")
    if env.tasks and not task:
        raise PluginError(f"game {name!r} needs a task: use {env.family}:<task>, e.g. {env.default_game()} "
                          f"(games: {', '.join(choices())})")
    if not env.tasks and task:
        raise PluginError(f"game {name!r}: {env.family} has no tasks, use {env.family!r} (games: {', '.join(choices())})")
    return _reference(env.family, task)


@lru_cache(maxsize=256)
def _reference(family: str, task: str) -> EnvRef:
    """The one reference of a canonical (family, task), whichever spelling led to it."""
    return EnvRef(f"{family}:{task}" if task else family, family, task, environments()[family])


def as_ref(game: str | EnvRef) -> EnvRef:
    """The reference of a game given by name or already resolved."""
    return game if isinstance(game, EnvRef) else env_ref(game)


def choices() -> list[str]:
    """One example name per registered family, for error messages."""
    return [repr(env.family) if not env.tasks else f"'{env.family}:<task>' (e.g. {env.default_game()})"
            for env in environments().values()]
