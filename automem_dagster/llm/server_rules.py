"""Which server versions honour what the project sends, checked before a round sends it.

vLLM accepts request fields it does not know and drops them (``OpenAIBaseModel`` is
``extra="allow"``; its ``__log_extra_fields__`` logs "The following fields were present in the
request but ignored" at warning level, vllm/entrypoints/openai/engine/protocol.py, vllm-project/vllm
commit 040a2cc2), so a field sent to a server too old to read it is answered with HTTP 200 and an
unconstrained reply, and only a line in the server's own log says so. ``structured_outputs`` (the grammar of
``constrained: vllm``) replaced the ``guided_*`` fields in vLLM PR #22772, first released in
v0.10.2; v0.12.0 removed ``guided_*``. The floor is therefore 0.10.2, and a server that reports
no version (``GET /version``, present in every vLLM release) cannot be shown to honour it.
"""

from __future__ import annotations

import json
import re

from automem_dagster.llm.config import IGNORED_FIELDS, EndpointConfig, EndpointConfigError
from automem_dagster.llm.server_api import call, vllm_version

VLLM_MINIMUM = {"vllm": (0, 10, 2)}
"""Per ``constrained`` mode, the first vLLM release that decodes under what the mode sends."""


def release(version: str) -> tuple[int, ...] | None:
    """``"0.10.2"``, ``"0.11.0rc1"``, ``"0.10.2.dev5+g1a2b"`` -> (0, 10, 2) / (0, 11, 0); None if not a version."""
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    return tuple(int(part or 0) for part in match.groups()) if match else None


def check_vllm_server(endpoint: EndpointConfig, base_url: str) -> str | None:
    """The version of the vLLM server at ``base_url``; ``EndpointConfigError`` when ``endpoint``'s mode
    needs a newer one or the server does not say. Not vLLM endpoints, and modes without a floor,
    are not asked (None). A server that cannot be reached is left to the first request's error."""
    floor = VLLM_MINIMUM.get(endpoint.constrained) if endpoint.server == "vllm" else None
    if floor is None:
        return None
    try:
        version = vllm_version(endpoint, base_url)
    except OSError:
        return None
    needed = ".".join(map(str, floor))
    where = f"endpoint {endpoint.name!r} ({base_url})"
    if version is None:
        raise EndpointConfigError(f"{where} is `server: vllm` but answers no version at GET /version, so it cannot be "
                                  f"shown to honour constrained: {endpoint.constrained} (vLLM {needed} or newer): check "
                                  "base_url points at a vLLM server, or set the server and mode of what runs there")
    found = release(version)
    if found is None or found < floor:
        raise EndpointConfigError(f"{where} runs vLLM {version}, which ignores structured_outputs (read from vLLM "
                                  f"{needed} on) and would decode unconstrained: upgrade vLLM to {needed} or newer, "
                                  "or set constrained: json_schema (response_format, which older vLLM reads)")
    return version


def ignored_fields(endpoint: EndpointConfig) -> tuple[str, ...]:
    """The request fields ``endpoint``'s provider is documented to accept and ignore (``IGNORED_FIELDS``)."""
    return next((fields for host, fields in IGNORED_FIELDS.items() if host in (endpoint.base_url or "")), ())


def reply_schema_kind(endpoint: EndpointConfig) -> str:
    """How a meta reply's JSON shape is held, for the endpoint record: the server enforces the schema, or
    only the prompt describes it (``meta/replies.describe_reply``); every reply is validated either way."""
    if endpoint.constrained == "none":
        return "described in the prompt and validated (no schema sent: constrained none)"
    if "response_format" in ignored_fields(endpoint):
        return "described in the prompt and validated (the provider ignores response_format)"
    return "enforced by the server and validated"


def check_llama_cpp_adapters(endpoint: EndpointConfig, base_url: str) -> None:
    """``EndpointConfigError`` when the remote llama.cpp server at ``base_url`` holds an adapter at a
    non-zero scale and ``endpoint`` names none per request (no ``lora_id``): llama.cpp applies the
    scales of ``--lora`` (1 unless started with ``--lora-init-without-apply``) to every request whose
    own ``lora`` list does not set them (tools/server/README.md, ``lora`` and ``GET /lora-adapters``),
    so this role, the game model typically, would play with the specialist. A server that does not
    answer the route is left alone; the project's embedded server is started without applying any."""
    if endpoint.server != "llama.cpp" or endpoint.embedded or endpoint.lora_id is not None:
        return
    try:
        status, body = call(endpoint, "GET", "/lora-adapters", base_url=base_url)
        adapters = json.loads(body) if status == 200 else []
    except (OSError, ValueError):
        return
    applied = [a for a in adapters if isinstance(a, dict) and a.get("scale")] if isinstance(adapters, list) else []
    if applied:
        shown = ", ".join(f"{a.get('path')} at scale {a.get('scale')}" for a in applied)
        raise EndpointConfigError(f"endpoint {endpoint.name!r} ({base_url}) is a llama.cpp server that applies {shown} "
                                  "to every request naming no adapter, so this role would play with it: restart it with "
                                  "--lora-init-without-apply (the memory role then selects it by lora_id), or serve "
                                  "this role from a server without --lora")


def check_server(endpoint: EndpointConfig, base_url: str) -> str | None:
    """Every check of one server before a round: ``check_llama_cpp_adapters``, then ``check_vllm_server``
    (its version, for vLLM)."""
    check_llama_cpp_adapters(endpoint, base_url)
    return check_vllm_server(endpoint, base_url)


def check_servers(roles: dict[str, EndpointConfig]) -> dict[str, str]:
    """``check_server`` for every server of every role, replicas included: the vLLM versions by base URL."""
    versions = {}
    for cfg in roles.values():
        for url in cfg.base_urls():
            version = check_server(cfg, url)
            if version is not None:
                versions[url] = version
    return versions
