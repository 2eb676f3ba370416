"""A batch's identity: everything that can change its episodes, and one digest that names it.

A batch directory is named by its settings (game, seeds, steps, scaffold version), which say
nothing about what played: a second endpoints file, another temperature or a Crafter upgrade
would otherwise reuse the first batch, and the gate would pair two models' episodes. So
``batch.json`` records an identity: per playing role (game, memory) the endpoint as its file and
its server describe it (``llm/server_info.py``), the agent and its settings, the scaffold hash
(memory agent; it covers the scaffold's routine, when LOG runs and when a consultation is reused:
``agent/savings.py``), the versions of the game's packages, and a world fingerprint per seed. Its
``digest`` names the batch: a batch is reused or resumed only under the same digest, and a
decision pairs two batches only when their identities differ in what the round tests.
docs/batch-identity.md says the same for users.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from automem_dagster.agent.memory_settings import needs_embed
from automem_dagster.agent.turn_format import TurnFormats, action_turn, reasoning_turn
from automem_dagster.games import as_ref, make_game
from automem_dagster.llm.rule_actor import RuleActor
from automem_dagster.llm.server_info import embedded_identity, endpoint_identity, package_version
from automem_dagster.memory.ops import OpName

IDENTITY_VERSION = 3
"""2: the memory routine is in the scaffold hash, and the separate ``step_policy`` of version 1 is gone.
3: each playing role records what its replays depend on (``replay``: the embedded server's one request at a
time, a vLLM declared batch-invariant), and a batch played by a role whose results may depend on what runs
beside it records its ``concurrency`` (issue 54).
A batch recorded under an earlier version differs in ``identity_version``, so it is played again beside it
and never paired, with those fields named."""
PLAYING_ROLES = ("game", "memory", "embed")
"""The roles whose models can change an episode; ``meta`` only reads finished batches."""


def plays(role: str, spec: Any) -> bool:
    """Whether ``role`` takes part in ``spec``'s episodes: the game model in every agent but random,
    the memory specialist in the memory agent, the embedding model in a rag baseline that embeds."""
    if spec.agent == "random":
        return False
    if role == "memory":
        return spec.agent == "memory"
    if role == "embed":
        return needs_embed(spec.agent, spec.settings)
    return True


def digest_of(identity: dict) -> str:
    """The digest of an identity (its ``digest`` and ``observed`` parts left out), 12 hex digits."""
    named = {k: v for k, v in identity.items() if k not in ("digest", "observed")}
    return hashlib.sha256(json.dumps(named, sort_keys=True, default=str).encode()).hexdigest()[:12]


def package_versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    """Installed version of each distribution (None when it is not installed)."""
    return {name: package_version(name) for name in packages}


_GAME_FACTS: dict[str, dict] = {}
_WORLDS: dict[tuple[str, int], str] = {}
"""Per process: a game's package versions and actions, and each (game, seed)'s world fingerprint.
A round fingerprints the same evaluation seeds for the candidate and the champion, and package
versions cannot change under a running process, so each world is built here once."""


def world_facts(game: str, seeds: list[int], max_steps: int) -> dict:
    """The game's package versions, its actions and each seed's world fingerprint (``Game.world_fingerprint``)."""
    missing = [s for s in seeds if (game, s) not in _WORLDS]
    if missing or game not in _GAME_FACTS:
        played = make_game(game, max_steps)
        try:
            _GAME_FACTS[game] = {"packages": package_versions(played.packages), "actions": list(played.actions())}
            for seed in missing:
                played.reset(seed)
                _WORLDS[(game, seed)] = played.world_fingerprint()
        finally:
            played.close()
    return {**_GAME_FACTS[game], "worlds": {str(s): _WORLDS[(game, s)] for s in seeds}}


def constraint_digest(mode: str, actions: list[str]) -> str | None:
    """A digest of the grammar (``gbnf``, ``vllm``) or JSON schema (``json_schema``) family the
    replies are held to, built on the game's actions; None for free text."""
    if mode == "none":
        return None
    formats = TurnFormats(list(OpName), 200, 40, 40)
    samples = [formats.log_turn(["notes.md"], ["notes.md"], 2), formats.plan_turn(["notes.md"], actions, True),
               action_turn(actions), reasoning_turn(actions, 200)]
    form = [s.schema if mode == "json_schema" else s.grammar for s in samples]
    return hashlib.sha256(json.dumps(form, sort_keys=True).encode()).hexdigest()[:16]


def role_identity(endpoint: dict, config: Any, actions: list[str]) -> dict:
    """One playing role's part: its ``endpoint`` as its server (``endpoint_identity``) or this machine
    (``embedded_identity``) describes it, and the constraint family of its ``config``."""
    return {**endpoint, "constraint_family": constraint_digest(config.constrained, actions)}


def identity_of(spec: Any, world: dict, roles: dict[str, dict]) -> dict:
    """The identity of ``spec`` (a ``RolloutSpec``) from its ``world_facts`` and its playing ``roles``' parts."""
    identity = {
        "identity_version": IDENTITY_VERSION,
        "game": spec.game,
        "seeds": list(spec.seeds),
        "max_steps": spec.max_steps,
        "agent": spec.agent_settings(),
        "scaffold_hash": spec.scaffold_hash() if spec.agent == "memory" else None,
        "roles": roles,
        "packages": world["packages"],
        "worlds": world["worlds"],
    }
    if any(not part.get("replay", {}).get("any_concurrency", True) for part in roles.values()):
        identity["concurrency"] = spec.concurrency  # such a server's results may depend on the batch beside them
    knobs = as_ref(spec.game).plugin.knobs
    if knobs is not None:  # a memory game's distance and distractors (recorded only where a family has knobs)
        identity["knobs"] = knobs(as_ref(spec.game).task)
    return {**identity, "digest": digest_of(identity)}


async def batch_identity(spec: Any, clients: Any) -> dict:
    """The identity of ``spec`` (a ``RolloutSpec``) played with ``clients``: probes the servers and
    builds each seed's world once (off the event loop), so it costs a few GETs and resets."""
    world = await asyncio.to_thread(world_facts, spec.game, list(spec.seeds), spec.max_steps)
    playing = {}
    for role in PLAYING_ROLES:
        client = getattr(clients, role, None)
        if isinstance(client, RuleActor):
            playing[role] = client.identity()
        elif client is not None and plays(role, spec):
            endpoint = await asyncio.to_thread(endpoint_identity, client.config, client.base_url)
            playing[role] = role_identity(endpoint, client.config, world["actions"])
    return identity_of(spec, world, playing)


def embedded_batch_identity(spec: Any, configs: dict[str, Any], lora: list, recorded: dict) -> dict | None:
    """The identity ``batch_identity`` would give ``spec`` played by the endpoints ``configs`` (per role,
    as a session would connect them: None for a role without a client), found without a server, or None
    when that needs one: a playing role not on the embedded server, or whose ``recorded`` part (of the
    batch's recorded identity) names another server package or model (``embedded_identity``)."""
    world = world_facts(spec.game, list(spec.seeds), spec.max_steps)
    playing = {}
    for role in PLAYING_ROLES:
        config = configs.get(role)
        if config is not None and plays(role, spec):
            part = embedded_identity(config, lora, recorded.get("roles", {}).get(role))
            if part is None:
                return None
            playing[role] = role_identity(part, config, world["actions"])
    return identity_of(spec, world, playing)


def observed_replies(clients: Any) -> dict:
    """Per playing role, the first reply's ``model`` and ``system_fingerprint`` (a hosted API's word)."""
    return {role: client.first_reply for role in PLAYING_ROLES
            if (client := getattr(clients, role, None)) is not None and getattr(client, "first_reply", None)}


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"roles": {"game": {"model": "a"}}}`` -> ``{"roles.game.model": "a"}``."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def differences(old: dict, new: dict) -> list[str]:
    """The dotted fields in which two identities differ (``digest`` and ``observed`` aside)."""
    a = flatten({k: v for k, v in old.items() if k not in ("digest", "observed")})
    b = flatten({k: v for k, v in new.items() if k not in ("digest", "observed")})
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def unlike_fields(recorded: dict, new: dict) -> list[str]:
    """What keeps a batch of identity ``recorded`` from being continued as one of identity ``new``:
    their differences, the seed list aside and the worlds of seeds only one of them plays (a batch
    may grow by seeds; a seed both play must have the same world)."""
    shared = {str(s) for s in recorded.get("seeds", [])} & {str(s) for s in new.get("seeds", [])}
    return [f for f in differences(recorded, new)
            if f != "seeds" and not (f.startswith("worlds.") and f.split(".", 1)[1] not in shared)]


def summarize_fields(fields: list[str], limit: int = 8) -> str:
    """Differing fields for a message: per-seed worlds counted as one entry, at most ``limit`` named."""
    worlds = [f for f in fields if f.startswith("worlds.")]
    named = [f for f in fields if not f.startswith("worlds.")] + ([f"worlds ({len(worlds)} seeds)"] if worlds else [])
    return ", ".join(named[:limit]) + (f" and {len(named) - limit} more" if len(named) > limit else "")


def merged_identity(identities: list[dict], seeds: list[int]) -> dict:
    """The identity of a batch played in shards: their common part, every seed's world, a new digest.
    Raises ``ValueError`` naming the fields when the shards were not played alike."""
    first = identities[0]
    for other in identities[1:]:
        differing = [f for f in differences(first, other) if f != "seeds" and not f.startswith("worlds.")]
        if differing:
            raise ValueError(f"shards were played with different {summarize_fields(differing)}")
    worlds = {k: v for identity in identities for k, v in identity.get("worlds", {}).items()}
    merged = {**first, "seeds": list(seeds), "worlds": {str(s): worlds.get(str(s)) for s in seeds}}
    observed = next((i["observed"] for i in identities if i.get("observed")), None)
    merged.pop("observed", None)
    return {**merged, "digest": digest_of(merged), **({"observed": observed} if observed else {})}
