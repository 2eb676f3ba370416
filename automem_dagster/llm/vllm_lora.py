"""Serve a trained peft adapter from a vLLM server through its runtime LoRA API, verified.

A vLLM server with ``--enable-lora`` serves the base model and any number of LoRA adapters
as separate model names. The specialist evaluation must score the adapter it just trained,
not whatever a fixed model name happens to serve, so the adapter is loaded under a name made
from its family, id and a hash of its files (``automem-crafter-a2-1f0c3b9e``), after its recorded
base is checked against the base the server serves (``adapter_base``: vLLM does not check it): a retrained
or replaced adapter always gets a new name, and a name that is already listed is the same
content, so loading it again is skipped. After loading, ``GET /v1/models`` must list the name
with the endpoint's base model as its ``parent`` before any memory turn is sent with it.

vLLM's behaviour relied on (``vllm/entrypoints/serve/lora/api_router.py`` and
``vllm/entrypoints/openai/models/serving.py``; ``docs/vllm.md``): the load and unload routes
exist only when the server runs with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (else 404
``{"detail": "Not Found"}``); a load answers 200 with plain text, a refusal a JSON
``{"error": {"message", "type", "code"}}`` whose message says why (an adapter rank above
``--max-lora-rank``, a path the server cannot see, a name already loaded). Those messages are
passed on with what to do about them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from automem_dagster.file_hashing import hash_file_into
from automem_dagster.llm.adapter_base import adapter_identity, base_mismatch, local_base_identity
from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.server_api import call, error_message

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
"""The files of a peft folder that vLLM reads: they alone decide the adapter's content hash."""

RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
TIMEOUT_S = 120.0
"""Loading reads the weights and may compile kernels on first use: far slower than a request."""


class VllmLoraError(RuntimeError):
    """An adapter that the vLLM server cannot serve; the message says why and what to do."""


@dataclass(frozen=True)
class ServedAdapter:
    """An adapter the server lists: the ``model`` name to send, its base, and whether this call loaded it."""

    name: str
    parent: str
    path: str
    rank: int
    loaded_now: bool


def adapter_files(adapter_dir: Path) -> list[Path]:
    folder = Path(adapter_dir)
    files = [folder / name for name in ADAPTER_FILES if (folder / name).is_file()]
    if not (folder / "adapter_config.json").is_file() or len(files) < 2:
        raise VllmLoraError(f"{folder} is not a peft adapter folder (needs adapter_config.json and "
                            "adapter_model.safetensors): point the registry at the trainer's `adapter` folder or retrain")
    return files


def content_hash(adapter_dir: Path) -> str:
    """sha256 over the adapter's config and weights (names and bytes), hex."""
    digest = hashlib.sha256()
    for path in adapter_files(adapter_dir):
        digest.update(path.name.encode() + b"\0")
        hash_file_into(digest, path)
    return digest.hexdigest()


def adapter_rank(adapter_dir: Path) -> int:
    """The LoRA rank ``r`` from the folder's ``adapter_config.json``."""
    path = Path(adapter_dir) / "adapter_config.json"
    try:
        return int(json.loads(path.read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise VllmLoraError(f"{path}: no LoRA rank `r` ({exc}); it is not a peft LoRA config, retrain the adapter") from exc


def adapter_name(family: str, adapter_id: str, adapter_dir: Path) -> str:
    """``automem-<family>-<adapter id>-<first 8 hex of the content hash>``: new content, new name."""
    return f"automem-{family}-{adapter_id}-{content_hash(adapter_dir)[:8]}"


def list_models(endpoint: EndpointConfig) -> list[dict]:
    """``GET /v1/models``: the base model(s) and every loaded adapter (``id``, ``root``, ``parent``)."""
    status, body = _call(endpoint, "GET", "/v1/models")
    if status != 200:
        raise VllmLoraError(f"{_where(endpoint)}: GET /v1/models answered HTTP {status} ({error_message(body)}): "
                            "check base_url and that the vLLM server is running")
    try:
        return list(json.loads(body)["data"])
    except (ValueError, KeyError, TypeError) as exc:
        raise VllmLoraError(f"{_where(endpoint)}: /v1/models did not answer a model list ({exc}); is this vLLM?") from exc


def serve_adapter(endpoint: EndpointConfig, name: str, adapter_dir: Path) -> ServedAdapter:
    """Make the vLLM server behind ``endpoint`` serve ``adapter_dir`` as ``name`` and confirm it.

    ``endpoint.model`` is the base model the server serves (the adapter's ``parent``). An
    adapter already listed under ``name`` is the same content (the name carries its hash)."""
    folder = Path(adapter_dir).resolve()
    rank = adapter_rank(folder)
    adapter_files(folder)
    models = list_models(endpoint)
    check_base(endpoint, name, folder, models)
    loaded_now = False
    if _find(models, name) is None:
        status, body = _call(endpoint, "POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)})
        if status != 200:
            raise VllmLoraError(_load_refusal(endpoint, name, folder, rank, status, body))
        loaded_now = True
    card = confirm_served(endpoint, name)
    parent = card.get("parent")
    if parent != endpoint.model:
        raise VllmLoraError(f"{_where(endpoint)} lists adapter {name} on base {parent!r}, not the memory endpoint's "
                            f"model {endpoint.model!r}: set the memory endpoint's `model` to the base model name the "
                            "server serves (--served-model-name)")
    return ServedAdapter(name, parent, str(card.get("root") or folder), rank, loaded_now)


def served_base(endpoint: EndpointConfig, models: list[dict] | None = None) -> str | None:
    """The hub id or path the server loaded ``endpoint.model`` from (its model card's ``root``), or None
    when the server does not list that base."""
    card = _find(list_models(endpoint) if models is None else models, endpoint.model)
    return (card.get("root") or card.get("id")) if card else None


def check_base(endpoint: EndpointConfig, name: str, folder: Path, models: list[dict]) -> None:
    """Refuse ``folder``'s adapter when it was trained on another base than the server serves
    (``adapter_base``): vLLM itself would load it onto whatever base it has."""
    root = served_base(endpoint, models)
    if root is None:
        raise VllmLoraError(f"{_where(endpoint)} does not list the base model {endpoint.model!r} at /v1/models: set the "
                            "memory endpoint's `model` to the base name the server serves (--served-model-name)")
    ours, theirs = adapter_identity(folder), local_base_identity(root)
    why = base_mismatch(ours, theirs)
    if why is not None:
        raise VllmLoraError(f"adapter {name} ({folder}) was trained on {ours.describe()}, but {_where(endpoint)} serves "
                            f"{endpoint.model!r} from {theirs.describe()} ({why}): train the specialist on the served "
                            f"base (`automem train --base {root}`, the default when the memory endpoint is vLLM) or "
                            "serve it from a vLLM running its own base")


def confirm_served(endpoint: EndpointConfig, name: str) -> dict:
    """The server's model card for ``name`` (``id``, ``root``, ``parent``); an error when it is not listed."""
    card = _find(list_models(endpoint), name)
    if card is None:
        raise VllmLoraError(f"{_where(endpoint)} does not list adapter {name} at /v1/models: the server was restarted "
                            "or the adapter unloaded since it was loaded; rerun the evaluation to load it again")
    return card


def unload_adapter(endpoint: EndpointConfig, name: str) -> bool:
    """Unload ``name``; False when the server did not have it. Frees a ``--max-loras`` slot."""
    status, body = _call(endpoint, "POST", "/v1/unload_lora_adapter", {"lora_name": name})
    if status == 200:
        return True
    if status == 404 and _is_error_json(body):
        return False
    raise VllmLoraError(f"{_where(endpoint)}: unloading {name} answered HTTP {status} ({error_message(body)})")


def _load_refusal(endpoint: EndpointConfig, name: str, folder: Path, rank: int, status: int, body: str) -> str:
    """What a refused load means and what to do, from vLLM's status and message."""
    where, message = _where(endpoint), error_message(body)
    if status == 404 and not _is_error_json(body):
        return (f"{where} has no runtime LoRA API (POST /v1/load_lora_adapter answered 404 {message}): restart vLLM "
                f"with {RUNTIME_ENV} and --enable-lora, so the specialist evaluation can load adapter {name}")
    if status == 404:
        return (f"{where} cannot see adapter folder {folder} ({message}): the server reads lora_path on its own "
                "filesystem, so make the runs/ folder visible to it at the same path (shared volume or bind mount)")
    if "rank" in message.lower():
        return (f"{where} refused adapter {name} of rank {rank} ({message}): restart vLLM with --max-lora-rank {rank} "
                "or more, or set the memory endpoint's max_lora_rank to the server's --max-lora-rank so training "
                "picks a rank it accepts")
    return (f"{where} refused to load adapter {name} from {folder} with HTTP {status} ({message}); "
            "see the vLLM server log")


def _find(models: list[dict], name: str) -> dict | None:
    return next((m for m in models if m.get("id") == name), None)


def _where(endpoint: EndpointConfig) -> str:
    return f"memory endpoint {endpoint.name!r} (vLLM at {endpoint.base_url})"


def _call(endpoint: EndpointConfig, method: str, route: str, payload: dict | None = None) -> tuple[int, str]:
    try:
        return call(endpoint, method, route, payload, timeout_s=TIMEOUT_S)
    except OSError as exc:
        raise VllmLoraError(f"{_where(endpoint)} is unreachable ({exc}): start the vLLM server or fix base_url") from exc


def _is_error_json(body: str) -> bool:
    """vLLM's own refusals are ``{"error": {...}}``; a missing route is FastAPI's ``{"detail": ...}``."""
    try:
        return isinstance(json.loads(body).get("error"), dict)
    except (ValueError, AttributeError):
        return False
