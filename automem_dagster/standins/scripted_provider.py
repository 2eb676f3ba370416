"""What a hosted provider refuses before it runs a model, for the scripted server.

Tests cannot reach OpenAI or Anthropic, so the scripted server can be told to refuse requests
the way they document and answer them, with their error shapes; a client change that sends a
parameter a provider refuses then fails a test here instead of a user's first real round.
What is enforced, and where it is written down:

* ``models``: an unknown model is HTTP 404, code ``model_not_found`` (OpenAI's error codes
  guide, platform.openai.com/docs/guides/error-codes).
* ``api_key``: a missing or wrong bearer key is HTTP 401, code ``invalid_api_key`` (same guide).
* ``refuse_params``: parameters the model does not take: OpenAI's reasoning models answer
  HTTP 400 ``unsupported_parameter`` for ``max_tokens`` ("Use 'max_completion_tokens'
  instead", platform.openai.com/docs/guides/reasoning) and ``unsupported_value`` for a
  ``temperature`` other than 1.
* ``exclusive_params``: pairs that may not be sent together: Anthropic's API reference says to
  alter ``temperature`` or ``top_p`` but not both (Messages, ``top_p``), and since Claude Opus 4.1
  its models answer HTTP 400 "`temperature` and `top_p` cannot both be specified for this
  model. Please use only one.", also through its OpenAI-compatible layer, in its own shape.
* ``strict_schemas``: a ``response_format`` of type ``json_schema`` with ``strict: true`` whose
  schema breaks the strict subset is HTTP 400 ``invalid_request_error`` with param
  ``response_format`` (platform.openai.com/docs/guides/structured-outputs, "Supported
  schemas"); the rules are ``strict_schema.strict_violations``.
* ``refuse_auto_tools``: a vLLM server started without ``--enable-auto-tool-choice`` and
  ``--tool-call-parser`` answers a request with ``tools`` and ``tool_choice: "auto"`` (vLLM's
  default when ``tools`` are sent) with HTTP 400 '"auto" tool choice requires
  --enable-auto-tool-choice and --tool-call-parser to be set', as ``BadRequestError`` with
  ``code`` 400 (vllm/entrypoints/openai/serving_chat.py ``create_chat_completion``; the error
  body is vLLM's ``ErrorResponse``/``ErrorInfo``); ``tool_choice: "none"`` is accepted.
* ``tool_calling``: one of ``scripted_tools.SERVERS`` (``openai``, ``anthropic``, ``vllm``,
  ``llama.cpp``): what that server does with tool calls, as ``scripted_tools.py`` documents;
  ``jinja: false`` is a llama.cpp started without ``--jinja``;
  ``exclude_tools_when_tool_choice_none`` a vLLM started with that flag.
* ``ignore_response_format``: Anthropic's OpenAI SDK compatibility page
  (docs.anthropic.com/en/api/openai-sdk, "Request fields": ``response_format`` and ``seed`` are
  listed as ignored) -- the request is answered as if neither were sent. A rule's ``free`` text
  (``scripted_server``) then answers unless the prompt itself names every field of the schema it
  sent, as a model told the shape only by the prompt answers in it only when the prompt says it.
  Otherwise a hosted API decodes under a ``response_format`` of type ``json_schema`` or
  ``json_object`` (platform.openai.com/docs/guides/structured-outputs) and under nothing else.
* ``lora``: with ``tool_calling: llama.cpp``, the adapters a llama.cpp server was started with
  (``--lora PATH``, ``{"path", "scale"}``; scale 0 is ``--lora-init-without-apply``), listed at
  ``GET /lora-adapters`` (``scripted_server.llama_cpp_adapters``).
* ``error_shape``: ``openai`` (``{"error": {"message", "type", "param", "code"}}``) or
  ``anthropic`` (``{"type": "error", "error": {"type", "message"}}``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from automem_dagster.llm.strict_schema import strict_violations
from automem_dagster.standins import scripted_tools


@dataclass
class Provider:
    models: list[str] = field(default_factory=list)
    api_key: str | None = None
    refuse_params: list[str] = field(default_factory=list)
    exclusive_params: list[list[str]] = field(default_factory=list)
    strict_schemas: bool = False
    refuse_auto_tools: bool = False
    tool_calling: str | None = None
    jinja: bool = True
    exclude_tools_when_tool_choice_none: bool = False
    ignore_response_format: bool = False
    error_shape: str = "openai"
    lora: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.tool_calling is not None and self.tool_calling not in scripted_tools.SERVERS:
            raise ValueError(f"tool_calling {self.tool_calling!r}: use one of {', '.join(scripted_tools.SERVERS)}")

    def constrains(self, body: dict) -> bool:
        """Whether the reply to ``body`` comes out in the requested shape (see the module doc)."""
        fmt = body.get("response_format") or {}
        if not self.ignore_response_format:
            return fmt.get("type") in ("json_schema", "json_object")
        schema = (fmt.get("json_schema") or {}).get("schema") or {}
        prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
        fields = property_names(schema)
        return bool(fields) and all(name in prompt for name in fields)

    def shape(self, body: dict, reply: str | dict) -> str | dict | None:
        """``reply`` as this provider's server lets the model give it (``scripted_tools.shape``)."""
        return (scripted_tools.shape(self.tool_calling, body, reply, self.exclude_tools_when_tool_choice_none)
                if self.tool_calling else reply)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> tuple[int, dict]:
        if self.error_shape == "anthropic":
            return status, {"type": "error", "error": {"type": kind, "message": message}}
        return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}

    def refusal(self, body: dict, authorization: str | None) -> tuple[int, dict] | None:
        """``(status, error payload)`` when the provider would refuse ``body``, else None."""
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            shown = (authorization or "")[-4:]
            return self._error(401, f"Incorrect API key provided: ...{shown}.", code="invalid_api_key")
        model = body.get("model")
        if self.models and model not in self.models:
            return self._error(404, f"The model `{model}` does not exist or you do not have access to it.",
                               code="model_not_found")
        for param in self.refuse_params:
            if param in body:
                if param == "temperature" and body[param] == 1:
                    continue
                if param == "temperature":
                    return self._error(400, f"Unsupported value: 'temperature' does not support {body[param]} with this "
                                       "model. Only the default (1) value is supported.", param=param, code="unsupported_value")
                hint = " Use 'max_completion_tokens' instead." if param == "max_tokens" else ""
                return self._error(400, f"Unsupported parameter: '{param}' is not supported with this model.{hint}",
                                   param=param, code="unsupported_parameter")
        for pair in self.exclusive_params:
            if all(p in body for p in pair):
                names = " and ".join(f"`{p}`" for p in pair)
                return self._error(400, f"{names} cannot both be specified for this model. Please use only one.")
        if self.refuse_auto_tools and body.get("tools") and body.get("tool_choice", "auto") == "auto":
            return 400, {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and '
                                   "--tool-call-parser to be set", "type": "BadRequestError", "param": None, "code": 400}}
        if self.tool_calling:
            refused = scripted_tools.refusal(self.tool_calling, body, self.jinja)
            if refused is not None:
                return refused
        fmt = body.get("response_format") or {}
        if self.strict_schemas and fmt.get("type") == "json_schema" and fmt.get("json_schema", {}).get("strict"):
            spec = fmt["json_schema"]
            problems = strict_violations(spec.get("schema", {}))
            if problems:
                return self._error(400, f"Invalid schema for response_format '{spec.get('name')}': {problems[0]}",
                                   param="response_format")
        return None


def property_names(schema: object) -> set[str]:
    """Every property name anywhere in a JSON schema (``$defs`` included)."""
    if isinstance(schema, list):
        return set().union(*(property_names(s) for s in schema)) if schema else set()
    if not isinstance(schema, dict):
        return set()
    names = set(schema["properties"]) if isinstance(schema.get("properties"), dict) else set()
    return names.union(*(property_names(v) for v in schema.values() if isinstance(v, dict | list)))
