"""Requests to a model server's own routes beside the OpenAI chat API (LoRA loading, tokenize).

vLLM and llama.cpp serve these at the server root, not under ``/v1``, and the openai client
has no methods for them, so they go out as plain JSON over ``urllib``: a few short synchronous
calls around a round need no other client. The endpoint's API key is sent as the chat API
would send it (vLLM's ``--api-key`` guards these routes too).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from automem_dagster.llm.config import EndpointConfig


def server_root(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000``: where vLLM's and llama.cpp's own routes live."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def call(endpoint: EndpointConfig, method: str, route: str, payload: dict | None = None, *,
         base_url: str | None = None, timeout_s: float | None = None) -> tuple[int, str]:
    """One request to ``route`` at the server root of ``base_url`` (default: the endpoint's);
    returns (HTTP status, body text). A server that cannot be reached raises ``OSError``."""
    headers = {"Content-Type": "application/json"}
    if endpoint.key_source() is not None:
        headers["Authorization"] = f"Bearer {endpoint.api_key()}"
    data = json.dumps(payload).encode() if payload is not None else None
    url = server_root(base_url or endpoint.base_url) + route
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s or endpoint.timeout_s) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def error_message(body: str) -> str:
    """The message of an ``{"error": {"message": ...}}`` body (vLLM, llama.cpp, OpenAI), else the body, short."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:300] or "empty body"
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("message", data["error"]))[:300]
    return json.dumps(data)[:300]


def vllm_version(endpoint: EndpointConfig, base_url: str | None = None) -> str | None:
    """The version a vLLM server reports at ``GET /version`` (``{"version": "0.11.0"}``, served at the
    root by every vLLM release), or None when the route is absent or says no version. A server that
    cannot be reached raises ``OSError``."""
    status, body = call(endpoint, "GET", "/version", base_url=base_url, timeout_s=min(endpoint.timeout_s, 10.0))
    if status != 200:
        return None
    try:
        version = json.loads(body).get("version")
    except (ValueError, AttributeError):
        return None
    return str(version) if version else None
