"""Turn an endpoints config into live clients, starting the embedded server when asked for.

Used as ``async with connect(config, log_dir) as clients:`` by the rollout runner, the CLI
and the Dagster endpoints resource, so the embedded server is always stopped, even when the run
fails. A whole round is several steps, each with its own event loop and clients; a ``ServerPool``
given to ``connect`` keeps the embedded server between them, so the round starts it once per
model (issue 43: each step used to start its own, even a rules-meta diagnosis that asks no model).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from threading import Lock

from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.config import RULES, EndpointConfig, EndpointsConfig, RulesMeta
from automem_dagster.llm.embedded_server import embedded_server
from automem_dagster.llm.process import ServerProcess
from automem_dagster.llm.replicas import ReplicatedClient
from automem_dagster.llm.rule_actor import RuleActor
from automem_dagster.llm.server_rules import check_servers, reply_schema_kind
from automem_dagster.llm.slot_turns import SlotTurns


@dataclass
class Clients:
    """One client per role; the rules meta (no model, ``RulesMeta``) has no client: it is ``rules_meta``.
    ``embed`` serves the ``rag`` baseline's embeddings (only when a session asks for it)."""

    game: LLMClient | ReplicatedClient | RuleActor | None
    memory: LLMClient | ReplicatedClient | None
    meta: LLMClient | ReplicatedClient | None
    rules_meta: RulesMeta | None = None
    embed: LLMClient | None = None

    def describe(self) -> dict:
        """Endpoint facts for trajectory headers and tracking: never the API key."""
        out = {}
        for role in ("game", "memory", "meta", "embed"):
            client = getattr(self, role)
            if isinstance(client, RuleActor):
                out[role] = client.identity()
            elif client is not None:
                out[role] = endpoint_facts(role, client.config, client.config.base_url)
        if self.rules_meta is not None:
            out["meta"] = self.rules_meta.facts()
        return out


def endpoint_facts(role: str, cfg: EndpointConfig, base_url: str) -> dict:
    """What ``Clients.describe`` says of one role's endpoint, served at ``base_url``."""
    return {"name": cfg.name, "base_url": base_url, "model": cfg.model, "server": cfg.server,
            "temperature": cfg.temperature, "constrained": cfg.constrained, "lora_id": cfg.lora_id,
            **({"reply_schema": reply_schema_kind(cfg)} if role == "meta" else {}),
            **({"replicas": list(cfg.replicas)} if cfg.replicas else {})}


def session_roles(config: EndpointsConfig, two_model: bool = False) -> dict[str, EndpointConfig]:
    """The roles ``connect(config, two_model=two_model)`` gives a client (the rules meta, no endpoint, is not one).
    Under the rule actor (``actor: rules``) the file's model always plays memory, and the game role is no endpoint."""
    if config.actor == RULES:
        return {"memory": config.memory or config.game, **{r: c for r, c in config.roles().items() if r == "meta"}}
    return {role: cfg for role, cfg in config.roles().items() if role != "memory" or (two_model and config.two_model)}


class ServerPool:
    """The embedded servers of one run, started on first use and kept until ``close``: one per model
    (the packaged model with a given list of LoRA adapters, slots and embeddings), whatever number of
    steps connect to it. ``starts`` counts the servers this pool started."""

    def __init__(self) -> None:
        self._servers: dict[tuple, ServerProcess] = {}
        self._lock = Lock()
        self.starts = 0

    def server(self, log_dir: Path, parallel: int, ctx_per_slot: int, lora: list[Path] | None,
               embeddings: bool) -> ServerProcess:
        key = (parallel, ctx_per_slot, tuple(str(p) for p in lora or ()), embeddings)
        with self._lock:
            if key not in self._servers:
                self._servers[key] = embedded_server(Path(log_dir) / "embedded_server.log", parallel=parallel,
                                                     ctx_per_slot=ctx_per_slot, lora=lora,
                                                     embeddings=embeddings).start()
                self.starts += 1
            return self._servers[key]

    def close(self) -> None:
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.stop()


META_ONLY = ("meta",)
"""The roles of a step that asks only the meta-LLM (diagnosis, revision, curation's review, LoRA settings)."""


def connected_roles(config: EndpointsConfig, two_model: bool = False,
                    roles: tuple[str, ...] | None = None) -> dict[str, EndpointConfig]:
    """The roles of ``session_roles`` a step uses: all of them, or those named in ``roles`` (a diagnosis
    asks only the meta role, so a rules meta there needs no server at all)."""
    return {r: cfg for r, cfg in session_roles(config, two_model).items() if roles is None or r in roles}


@asynccontextmanager
async def connect(config: EndpointsConfig, log_dir: Path, lora: list[Path] | None = None, two_model: bool = False,
                  embed: bool = False, servers: ServerPool | None = None, roles: tuple[str, ...] | None = None):
    """Clients for ``config``'s roles. The ``memory`` role is the memory specialist's endpoint: it
    gets a client only with ``two_model`` (a specialist evaluation), so a file that names one does
    not turn the structure loop's or the training rollouts' one-model agent into a two-model one.
    ``embed`` (the ``rag`` baseline's embedding search) adds the ``embed`` role's client; without an
    ``embed`` role the embedded server, started with embeddings on, serves them. ``roles`` limits the
    clients to the roles a step uses. The embedded server is started only when a connected role is
    embedded: from ``servers`` (kept for the run) when given, else here and stopped on exit. A vLLM
    server too old to honour its role's constraint is refused here, before any request (``server_rules``)."""
    used = connected_roles(config, two_model, roles)
    check_servers(used)
    embed_cfg = config.embed_endpoint() if embed else None
    embeddings = embed_cfg is not None and embed_cfg.embedded
    server, own = None, servers is None
    if any(c.embedded for c in used.values()) or embeddings:
        pool = servers or ServerPool()
        server = pool.server(log_dir, config.embedded_parallel, config.embedded_ctx_per_slot, lora, embeddings)
    turns = SlotTurns(config.embedded_parallel)  # every client of the embedded server takes its turn

    def client(cfg: EndpointConfig | None) -> LLMClient | ReplicatedClient | None:
        if cfg is None:
            return None
        if cfg.replicas:
            return ReplicatedClient(cfg)
        if not cfg.embedded:
            return LLMClient(cfg, cfg.base_url)
        # An embedded endpoint has one server slot's context, whatever its config says.
        slot = cfg.model_copy(update={"context_tokens": min(cfg.context_tokens, config.embedded_ctx_per_slot)})
        return LLMClient(slot, server.base_url, slots=config.embedded_parallel, turns=turns)

    rules = config.rules_meta if roles is None or "meta" in roles else None
    acting = config.actor == RULES and (roles is None or "game" in roles)
    clients = Clients(RuleActor() if acting else client(used.get("game")), client(used.get("memory")),
                      client(used.get("meta")), rules, client(embed_cfg))
    try:
        yield clients
    finally:
        for c in (clients.game, clients.memory, clients.meta, clients.embed):
            if c is not None:
                await c.close()
        if server is not None and own:
            server.stop()
