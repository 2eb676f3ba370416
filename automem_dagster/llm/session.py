"""Turn an endpoints config into live clients, starting the embedded server when asked for.

Used as ``async with connect(config, log_dir) as clients:`` by the rollout runner, the CLI
and (later) Dagster resources, so the embedded server is started once per run and always
stopped, even when the run fails.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.config import EndpointConfig, EndpointsConfig
from automem_dagster.llm.embedded_server import embedded_server
from automem_dagster.llm.replicas import ReplicatedClient
from automem_dagster.llm.server_rules import check_servers, reply_schema_kind


@dataclass
class Clients:
    """One client per role; a ``rules`` meta (no model) has no client, only its config in ``rules_meta``.
    ``embed`` serves the ``rag`` baseline's embeddings (only when a session asks for it)."""

    game: LLMClient | ReplicatedClient
    memory: LLMClient | ReplicatedClient | None
    meta: LLMClient | ReplicatedClient | None
    rules_meta: EndpointConfig | None = None
    embed: LLMClient | None = None

    def describe(self) -> dict:
        """Endpoint facts for trajectory headers and tracking: never the API key."""
        out = {}
        for role in ("game", "memory", "meta", "embed"):
            client = getattr(self, role)
            cfg = client.config if client is not None else self.rules_meta if role == "meta" else None
            if cfg is not None:
                out[role] = endpoint_facts(role, cfg, cfg.base_url)
        return out


def endpoint_facts(role: str, cfg: EndpointConfig, base_url: str) -> dict:
    """What ``Clients.describe`` says of one role's endpoint, served at ``base_url``."""
    return {"name": cfg.name, "base_url": base_url, "model": cfg.model, "server": cfg.server,
            "temperature": cfg.temperature, "constrained": cfg.constrained, "lora_id": cfg.lora_id,
            **({"reply_schema": reply_schema_kind(cfg)} if role == "meta" else {}),
            **({"replicas": list(cfg.replicas)} if cfg.replicas else {})}


def session_roles(config: EndpointsConfig, two_model: bool = False) -> dict[str, EndpointConfig]:
    """The roles ``connect(config, two_model=two_model)`` gives a client (or, a rules meta, its config)."""
    return {role: cfg for role, cfg in config.roles().items() if role != "memory" or (two_model and config.two_model)}


@asynccontextmanager
async def connect(config: EndpointsConfig, log_dir: Path, lora: list[Path] | None = None, two_model: bool = False,
                  embed: bool = False):
    """Clients for ``config``'s roles. The ``memory`` role is the memory specialist's endpoint: it
    gets a client only with ``two_model`` (a specialist evaluation), so a file that names one does
    not turn the structure loop's or the training rollouts' one-model agent into a two-model one.
    ``embed`` (the ``rag`` baseline's embedding search) adds the ``embed`` role's client; without an
    ``embed`` role the embedded server, started with embeddings on, serves them. A vLLM server too
    old to honour its role's constraint is refused here, before any request (``server_rules``)."""
    check_servers({r: c for r, c in config.roles().items() if not c.rules and (r != "memory" or two_model)})
    server = None
    embed_cfg = config.embed_endpoint() if embed else None
    if config.uses_embedded() or (embed_cfg is not None and embed_cfg.embedded):
        server = embedded_server(
            Path(log_dir) / "embedded_server.log", parallel=config.embedded_parallel,
            ctx_per_slot=config.embedded_ctx_per_slot, lora=lora,
            embeddings=embed_cfg is not None and embed_cfg.embedded,
        ).start()

    def client(cfg: EndpointConfig | None) -> LLMClient | ReplicatedClient | None:
        if cfg is None:
            return None
        if cfg.replicas:
            return ReplicatedClient(cfg)
        if not cfg.embedded:
            return LLMClient(cfg, cfg.base_url)
        # An embedded endpoint has one server slot's context, whatever its config says.
        slot = cfg.model_copy(update={"context_tokens": min(cfg.context_tokens, config.embedded_ctx_per_slot)})
        return LLMClient(slot, server.base_url, slots=config.embedded_parallel)

    rules = config.meta if config.meta is not None and config.meta.rules else None
    roles = session_roles(config, two_model)
    clients = Clients(client(roles["game"]), client(roles.get("memory")), None if rules else client(roles.get("meta")),
                      rules, client(embed_cfg))
    try:
        yield clients
    finally:
        for c in (clients.game, clients.memory, clients.meta, clients.embed):
            if c is not None:
                await c.close()
        if server is not None:
            server.stop()
