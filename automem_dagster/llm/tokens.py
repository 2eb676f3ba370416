"""Token counts as the endpoint's own server counts them, chars/4 only where it cannot.

A meta-LLM input is fitted into the endpoint's ``context_tokens``. Characters / 4 is the usual
average for English prose under BPE tokenizers, but trajectories are full of ASCII maps that
tokenize far denser (SmolLM2: 1.8 characters per token on a Crafter map), so an estimate
overflows the context and the overflow is only discovered through a refusal. Both servers this
project runs have a tokenize route, and their count is the one the context limit is checked
against:

- llama.cpp (``server: llama.cpp``, the embedded server included): ``POST /tokenize``
  ``{"content": text}`` -> ``{"tokens": [...]}``, and ``POST /apply-template``
  ``{"messages": [...]}`` -> ``{"prompt": text}`` renders the chat template, so a message list is
  counted exactly as a chat request's ``prompt_tokens`` (checked against the embedded server).
- vLLM (``server: vllm``): ``POST /tokenize`` ``{"model", "prompt"}`` or ``{"model", "messages"}``
  -> ``{"count", "max_model_len", "tokens"}``.

Both routes sit at the server root, not under ``/v1``. Hosted APIs (``openai-compatible``) have
none: their counts are chars/4, and so is any count after the server's route failed once (a
404 from a server without it, a proxy in front, a refused key); ``note`` then says why, so a
record can show how its budget was measured.
"""

from __future__ import annotations

import json
import logging

from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.server_api import call, error_message

CHARS_PER_TOKEN = 4
log = logging.getLogger(__name__)


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` is taken to cost without a tokenizer: characters / 4, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


class TokenCounter:
    """Counts text and chat messages for one endpoint; ``exact`` says whether the server counts.

    ``base_url`` is where the server really is (an embedded endpoint's configured URL is only
    the word ``embedded``: pass the started server's)."""

    def __init__(self, endpoint: EndpointConfig | None, base_url: str | None = None):
        self.endpoint = endpoint
        self.base_url = base_url or (endpoint.base_url if endpoint else None)
        self.server = endpoint.server if endpoint else None
        self.exact = self.server in ("vllm", "llama.cpp") and self.base_url not in (None, "embedded")
        self.note: str | None = None
        if endpoint is not None and not self.exact:
            self.note = (f"endpoint {endpoint.name!r} ({self.server}) has no tokenize route: tokens are estimated "
                         "as chars/4, which undercounts ASCII maps; keep a margin in context_tokens")
        self.requests = 0

    @classmethod
    def estimate(cls) -> TokenCounter:
        """A counter with no server: chars/4 throughout."""
        return cls(None)

    @classmethod
    def for_client(cls, client) -> TokenCounter:
        """The counter of an ``LLMClient``'s endpoint, at the URL the client really talks to."""
        return cls(client.config, client.base_url)

    @property
    def method(self) -> str:
        return f"exact, {self.server} /tokenize" if self.exact else "chars/4"

    def count(self, text: str) -> int:
        """Tokens of ``text`` on its own (no chat template, no BOS)."""
        if self.exact:
            if self.server == "vllm":
                tokens = self._tokenize({"model": self.endpoint.model, "prompt": text, "add_special_tokens": False})
            else:
                tokens = self._tokenize({"content": text})
            if tokens is not None:
                return tokens
        return estimate_tokens(text)

    def count_messages(self, messages: list[dict]) -> int:
        """Prompt tokens of a chat request with ``messages``: the chat template included when exact."""
        if self.exact:
            if self.server == "vllm":
                tokens = self._tokenize({"model": self.endpoint.model, "messages": messages,
                                         "add_generation_prompt": True})
            else:
                prompt = self._post("/apply-template", {"messages": messages}, "prompt")
                tokens = None if prompt is None else self._tokenize({"content": prompt})
            if tokens is not None:
                return tokens
        return sum(estimate_tokens(str(m.get("content", ""))) for m in messages)

    def _tokenize(self, payload: dict) -> int | None:
        if self.server == "vllm":
            return self._post("/tokenize", payload, "count")
        tokens = self._post("/tokenize", payload, "tokens")
        return None if tokens is None else len(tokens)

    def _post(self, route: str, payload: dict, key: str):
        """The ``key`` of the server's answer, or None after switching to chars/4 with the reason."""
        self.requests += 1
        url = f"{self.base_url} ({route} at its root)"
        try:
            status, body = call(self.endpoint, "POST", route, payload, base_url=self.base_url)
        except OSError as exc:
            return self._fall_back(f"{url} is unreachable ({exc})")
        if status != 200:
            return self._fall_back(f"{url} answered HTTP {status} ({error_message(body)})")
        try:
            return json.loads(body)[key]
        except (ValueError, KeyError, TypeError):
            return self._fall_back(f"{url} answered without {key!r}: {body[:200]}")

    def _fall_back(self, reason: str) -> None:
        self.exact = False
        self.note = (f"endpoint {self.endpoint.name!r}: {reason}; tokens are estimated as chars/4 from here on, "
                     f"which undercounts ASCII maps (set `server:` to what really serves it, or keep a margin)")
        log.warning(self.note)
        return None
