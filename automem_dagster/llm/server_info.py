"""What a playing endpoint is, as its configuration and its server say: the part of a batch's
identity (``rollout/identity.py``) that names the model that played.

An endpoint file's ``model`` is only a name: two servers can serve different weights under it,
and one server can change its weights under the same name. So beside what the file sets
(sampling, output cap, constrained mode, prompt cache, adapter selection) each playing role
records what its server reports about itself, where it reports it:

* llama.cpp: ``GET /props`` (``build_info``, ``model_path``; tools/server/README.md), and with a
  per-request adapter ``GET /lora-adapters`` (``id``, ``path``), whose file is hashed when it is
  on this machine (the embedded server);
* vLLM: ``GET /version`` (``server_api.vllm_version``);
* every server: the model's entry in ``GET /v1/models``: vLLM's ``root`` (the weights path, or
  an adapter's folder) and ``parent`` (an adapter's base model); OpenAI's ``owned_by``;
* hosted APIs, which report nothing of the kind up front: the ``model`` and ``system_fingerprint``
  of the first reply (``LLMClient.first_reply``), recorded after the batch as observed, not part
  of the digest, because they are only known once the batch has played.

A route that fails or is missing is recorded as None; the probes are a few short GETs per batch.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

from automem_dagster.file_hashing import hash_file_into
from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.embedded_server import GGUF_NAME
from automem_dagster.llm.server_api import call, vllm_version
from automem_dagster.llm.slot_turns import HOW as SLOT_HOW
from automem_dagster.llm.vllm_lora import VllmLoraError
from automem_dagster.llm.vllm_lora import content_hash as adapter_dir_hash

PROBE_TIMEOUT_S = 10.0


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _get(config: EndpointConfig, route: str, base_url: str):
    """The JSON a GET of ``route`` at the server root answers, or None (unreachable, not 200, not JSON)."""
    try:
        status, body = call(config, "GET", route, base_url=base_url, timeout_s=min(config.timeout_s, PROBE_TIMEOUT_S))
        return json.loads(body) if status == 200 else None
    except (OSError, ValueError):
        return None


def model_card(config: EndpointConfig, base_url: str) -> dict | None:
    """What ``/v1/models`` says of ``config.model``: its ``root``, ``parent`` and ``owned_by``;
    ``{"listed": False}`` when the list does not hold it, None when there is no list."""
    listing = _get(config, "/v1/models", base_url)
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("id") == config.model:
            return {"listed": True, **{k: entry.get(k) for k in ("root", "parent", "owned_by")}}
    return {"listed": False}


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    hash_file_into(digest, path)
    return digest.hexdigest()


def adapter_facts(path: str | None) -> dict:
    """Name, content hash and base model of an adapter file or peft folder this machine can read."""
    if not path:
        return {"name": None, "sha256": None, "base": None}
    where = Path(path)
    facts: dict = {"name": where.name, "sha256": None, "base": None}
    try:
        facts["sha256"] = adapter_dir_hash(where) if where.is_dir() else file_digest(where) if where.is_file() else None
    except (OSError, VllmLoraError):
        pass
    config = (where if where.is_dir() else where.parent) / "adapter_config.json"
    if config.is_file():
        try:
            facts["base"] = json.loads(config.read_text()).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError):
            pass
    return facts


def served_adapter(config: EndpointConfig, base_url: str, card: dict | None) -> dict | None:
    """The adapter this endpoint plays with: llama.cpp's per-request ``lora_id`` (looked up in
    ``/lora-adapters``), or a vLLM model card whose ``parent`` names a base (a runtime LoRA)."""
    if config.lora_id is not None:
        adapters = _get(config, "/lora-adapters", base_url)
        path = next((a.get("path") for a in adapters or [] if isinstance(a, dict) and a.get("id") == config.lora_id),
                    None)
        return {"lora_id": config.lora_id, **adapter_facts(path)}
    if card and card.get("parent"):
        facts = adapter_facts(card.get("root"))
        return {**facts, "name": config.model, "base": facts["base"] or card["parent"]}
    return None


def server_report(config: EndpointConfig, base_url: str) -> dict:
    """What the server behind ``base_url`` says of its kind and version (see the module docstring)."""
    if config.server == "llama.cpp":
        props = _get(config, "/props", base_url)
        props = props if isinstance(props, dict) else {}
        model_path = props.get("model_path")
        report = {"kind": "llama.cpp", "version": props.get("build_info"),
                  "model_file": Path(model_path).name if model_path else None}
        # The embedded server's build reports no build number: its package's version names it.
        return {**report, "package": package_version("xllamacpp")} if config.embedded else report
    if config.server == "vllm":
        try:
            return {"kind": "vllm", "version": vllm_version(config, base_url)}
        except OSError:
            return {"kind": "vllm", "version": None}
    return {"kind": config.server, "version": None}


def configured_identity(config: EndpointConfig) -> dict:
    """The part of an endpoint's identity that its file alone sets (model name, constraint, sampling,
    output cap, prompt cache): the same whether or not its server is running."""
    extra = json.dumps(config.extra_body, sort_keys=True)
    return {
        "model": config.model,
        "constrained": config.constrained,
        "sampling": {**config.sampling(), "seed": config.seed,
                     "extra_body": hashlib.sha256(extra.encode()).hexdigest()[:16] if config.extra_body else None},
        "output_cap": {"field": config.max_tokens_field, "value": config.max_tokens},
        "cache_prompt": config.cache_prompt if config.server == "llama.cpp" else None,
        "replay": replay_conditions(config),
    }


def replay_conditions(config: EndpointConfig) -> dict:
    """What a replay of this endpoint's requests depends on besides the requests (issue 54): ``any_concurrency``
    says whether a request's result stays the same whatever runs beside it. The embedded server takes one
    request at a time (``llm/slot_turns.py``); a vLLM server declared ``batch_invariant`` keeps batches
    from changing results; any other server may batch concurrent requests, so a batch's identity then
    records its concurrency (``rollout.identity``) and an A/A licenses reuse only at that concurrency."""
    if config.embedded:
        return {"any_concurrency": True, "how": SLOT_HOW}
    if config.server == "vllm" and config.batch_invariant:
        return {"any_concurrency": True, "how": "vLLM with VLLM_BATCH_INVARIANT=1 (declared by the endpoints file)"}
    return {"any_concurrency": False, "how": "concurrent requests may be batched together"}


def endpoint_identity(config: EndpointConfig, base_url: str) -> dict:
    """Everything about one playing endpoint that can change an episode (never its key or URL:
    the same model moved to another host plays the same episodes)."""
    card = model_card(config, base_url)
    return {"server": server_report(config, base_url), "model_card": card,
            "adapter": served_adapter(config, base_url, card), **configured_identity(config)}


def embedded_identity(config: EndpointConfig, lora: list[Path], recorded: dict | None) -> dict | None:
    """``endpoint_identity`` of an embedded endpoint without starting its server, or None when this
    machine cannot tell it without asking the server (not embedded; nothing ``recorded``; another
    xllamacpp package, model file (``GGUF_NAME``) or model name than the ``recorded`` role's).

    The embedded server's answers are fixed by what the project installs: ``/props`` and
    ``/v1/models`` by the xllamacpp package and the packaged GGUF it loads (and ``/v1/models`` by
    the model name asked about), ``/lora-adapters`` by the ``lora`` files it is started with, in
    order, which this machine hashes. So with those unchanged the recorded ``server`` and
    ``model_card`` are what a probe would answer, and the adapter is computed from ``lora``."""
    if not config.embedded or not recorded:
        return None
    server = recorded.get("server") or {}
    if (server.get("kind"), server.get("package"), server.get("model_file"), recorded.get("model")) != (
            "llama.cpp", package_version("xllamacpp"), GGUF_NAME, config.model):
        return None
    adapter = None
    if config.lora_id is not None:
        path = lora[config.lora_id] if 0 <= config.lora_id < len(lora) else None
        adapter = {"lora_id": config.lora_id, **adapter_facts(str(path) if path else None)}
    return {"server": server, "model_card": recorded.get("model_card"), "adapter": adapter,
            **configured_identity(config)}
