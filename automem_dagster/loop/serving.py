"""Which endpoints the proficiency loop plays with: the one-model agent, and the two-model agent
whose memory endpoint serves one specialist adapter (embedded GGUF or vLLM runtime LoRA), checked
to be that adapter before its score is credited to it."""

from __future__ import annotations

from pathlib import Path

from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.config import EndpointConfig, EndpointsConfig
from automem_dagster.llm.replicas import ReplicatedClient
from automem_dagster.llm.rule_actor import RuleActor
from automem_dagster.llm.session import Clients
from automem_dagster.llm.vllm_lora import VllmLoraError, adapter_name, confirm_served, list_models, serve_adapter, served_base
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.settings import ProficiencyConfig
from automem_dagster.training.base_model import EMBEDDED_BASE
from automem_dagster.training.registry import AdapterRecord


def one_model(clients: Clients) -> Clients:
    """The same server, with the agent doing its own memory operations; under the rule actor
    (``actor: rules``), which cannot, the clients as they are: the model plays memory, the rules act."""
    if isinstance(clients.game, RuleActor):
        return clients
    return Clients(clients.game, None, clients.meta)


def serving_rank_limit(config: EndpointsConfig) -> int | None:
    """The ``max_lora_rank`` of the vLLM endpoint that will serve the specialist, if one says so."""
    server = config.memory or config.game
    return server.max_lora_rank if server.server == "vllm" else None


def specialist_endpoints(config: EndpointsConfig, record: AdapterRecord,
                         family: str) -> tuple[EndpointsConfig, list[Path]]:
    """Endpoints of the two-model agent and the adapters the embedded server must load.

    A vLLM memory endpoint (``server: vllm``; without a ``memory:`` endpoint, a vLLM game
    endpoint serves it too) gets the adapter's peft folder loaded through the runtime LoRA API
    under a name carrying its content hash, confirmed in the server's model list, and that name
    becomes the memory endpoint's ``model``: the evaluation can only score this adapter. Another
    configured ``memory:`` endpoint is used only when it proves to serve this adapter
    (``prove_served_as_given``). Otherwise the embedded server loads the
    adapter's GGUF and the memory endpoint is the game endpoint with that adapter selected per
    request."""
    memory = config.memory
    if memory is None and config.game.server == "vllm":
        memory = config.game.model_copy(update={"name": "memory"})
    if memory is not None and memory.server == "vllm":
        try:
            # Every replica serves the memory role, so every replica loads the adapter.
            served = [serve_adapter(memory.model_copy(update={"base_url": url, "replicas": []}),
                                    served_name(family, record), Path(record.adapter_dir)) for url in memory.base_urls()]
        except VllmLoraError as exc:
            raise RoundError(f"specialist {record.id}: {exc}") from exc
        return config.model_copy(update={"memory": memory.model_copy(update={"model": served[0].name})}), []
    if memory is not None:
        prove_served_as_given(memory, family, record)
        return config, []
    if not config.game.embedded:
        raise RoundError(f"the game endpoint {config.game.base_url} is not the embedded server: add a `memory:` endpoint "
                         f"that serves adapter {record.id} ({record.adapter_dir}; vLLM: `server: vllm` with runtime "
                         "LoRA loading, see docs/vllm.md)")
    if record.gguf is None:
        raise RoundError(f"adapter {record.id} has no GGUF export for the embedded server: retrain with base `embedded`")
    memory = config.game.model_copy(update={"name": "memory", "lora_id": 0})
    return config.model_copy(update={"memory": memory}), [Path(record.gguf)]


def prove_served_as_given(memory: EndpointConfig, family: str, record: AdapterRecord) -> None:
    """A memory endpoint that is neither vLLM nor the embedded server cannot be told to load an adapter,
    so it must already serve this one under its content-hashed name (``served_name``, as its
    ``model``) and list it at ``/v1/models``; otherwise the score could belong to any model."""
    name = served_name(family, record)
    fix = (f"serve adapter {record.id} ({record.adapter_dir}) under the model name {name} and set the memory "
           "endpoint's `model` to it, or use `server: vllm` (runtime loading) or no memory endpoint (embedded)")
    if memory.model != name:
        raise RoundError(f"the memory endpoint {memory.name!r} ({memory.server} at {memory.base_url}) sends model "
                         f"{memory.model!r}, which cannot be shown to be adapter {record.id}: {fix}")
    for url in memory.base_urls():
        try:
            listed = [m.get("id") for m in list_models(memory.model_copy(update={"base_url": url, "replicas": []}))]
        except VllmLoraError as exc:
            raise RoundError(f"specialist {record.id}: {exc}") from exc
        if name not in listed:
            raise RoundError(f"the memory endpoint's server {url} does not list {name} at /v1/models: {fix}")


def serving_base(config: EndpointsConfig) -> str | None:
    """The base model (hub id or path) the vLLM server that will serve the specialist serves, where one
    does and can be asked: the default training base, so the adapter fits the server it is scored on."""
    server = config.memory or config.game
    if server.server != "vllm":
        return None
    try:
        return served_base(server)
    except VllmLoraError:
        return None


def with_training_base(settings: ProficiencyConfig, config: EndpointsConfig) -> ProficiencyConfig:
    """``settings`` with its base filled in when none was given: the serving vLLM's base, else ``embedded``."""
    if settings.training.base is not None:
        return settings
    return settings.with_training(base=serving_base(config) or EMBEDDED_BASE)


def served_name(family: str, record: AdapterRecord) -> str:
    """The model name a vLLM server serves ``record`` under (its content hash included)."""
    try:
        return adapter_name(family, record.id, Path(record.adapter_dir))
    except VllmLoraError as exc:
        raise RoundError(f"specialist {record.id}: {exc}") from exc


def check_specialist_served(memory: LLMClient | ReplicatedClient, family: str, record: AdapterRecord) -> None:
    """Refuse to evaluate a vLLM memory endpoint that does not name ``record``'s adapter, or whose
    server no longer lists it: another adapter's score must never be credited to this one."""
    if memory.config.server != "vllm":
        return
    name = served_name(family, record)
    if memory.config.model != name:
        raise RoundError(f"the memory endpoint sends model {memory.config.model!r}, not adapter {record.id} ({name}): "
                         "build the endpoints with specialist_endpoints, which loads the adapter and names it")
    servers = memory.replica_clients() if isinstance(memory, ReplicatedClient) else [memory]
    try:
        for server in servers:
            confirm_served(memory.config.model_copy(update={"base_url": server.base_url, "replicas": []}), name)
    except VllmLoraError as exc:
        raise RoundError(f"specialist {record.id}: {exc}") from exc
