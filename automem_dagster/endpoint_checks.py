"""Check an endpoints file before a round, and list every JSON schema the project sends.

A round that fails on its first meta call after an hour of rollouts has wasted the hour, so a
user checks the file first: every role's key variable, a vLLM server's version against what its
mode sends and a remote llama.cpp's adapters applied to every request (``llm/server_rules.py``),
then (unless it is a dry run) one tiny request per role in
the mode that role will use (a one-action turn for the game model, a LOG turn for the memory
model, a strict JSON reply for the meta-LLM). The probe asks for a plain sentence, which breaks
the grammar or schema sent, so a reply that parses proves the server applied the constraint; a
server that accepts the constraint and ignores it (HTTP 200, unconstrained text) is caught here.
A meta endpoint whose server ignores ``response_format`` (Anthropic's OpenAI layer) is asked
again with the reply's fields named in the prompt: usable, and recorded as "described", since
the meta calls name them too and validate every reply. The schemas are listed so a user can try
them against a provider by hand.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from automem_dagster.agent.baselines import REASONING_MAX_CHARS
from automem_dagster.agent.turn_format import TurnConstraint, TurnFormats, action_turn, ask, reasoning_turn
from automem_dagster.games import make_game
from automem_dagster.llm.client import EndpointError
from automem_dagster.llm.config import RULES, EndpointConfig, EndpointConfigError, EndpointsConfig
from automem_dagster.llm.replicas import ReplicatedClient
from automem_dagster.llm.server_rules import check_server
from automem_dagster.llm.session import connect
from automem_dagster.llm.strict_schema import to_strict
from automem_dagster.memory import OpName, parse_ops
from automem_dagster.meta.curate import CurationSettings
from automem_dagster.meta.diagnose import reply_schema as diagnosis_schema
from automem_dagster.meta.lora_config import reply_schema as lora_schema
from automem_dagster.meta.meta_review import review_schema
from automem_dagster.meta.replies import describe_reply
from automem_dagster.meta.revise import revision_schema
from automem_dagster.meta.tool_session import NO_TOOLS_HINT
from automem_dagster.rollout.seeds import eval_seeds
from automem_dagster.scaffold.model import Scaffold

PROBE_ACTIONS = ["north", "south"]
PROBE_FILE = "notes.txt"
PROBE_SCHEMA = to_strict({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
OFF_FORMAT = "Do not use any reply format. Answer in one plain English sentence: what colour is the sky?"
"""The probe's question: a model left free answers it with a sentence, which no turn grammar or
reply schema admits, so only a server that applies the constraint returns a reply that parses."""
DIAGNOSIS_MAX_STEP = 999
"""The step bound shown for the diagnosis schema; a real call narrows it to the batch's steps."""


def turn_constraints(game: str, scaffold: Scaffold) -> dict[str, TurnConstraint]:
    """Every turn constraint sent for ``game`` with ``scaffold``, each as a grammar and a schema, by name.

    They are built for the scaffold's initial files with the full operation budget; a real turn
    narrows the enums to the files the store holds then."""
    env = make_game(game)
    try:
        actions = list(env.actions())
    finally:
        env.close()
    formats = TurnFormats(scaffold.operations, scaffold.limits.text_max_chars, scaffold.limits.key_max_chars,
                          scaffold.limits.keyword_max_chars)
    files = [f.name for f in scaffold.files]
    writable = scaffold.model_writable_files()
    return {
        "log_turn": formats.log_turn(files, writable, scaffold.limits.log_max_ops),
        "plan_turn": formats.plan_turn(files, actions, consult=True),
        "plan_turn_memory_model": formats.plan_turn(files, actions, consult=True, end_with_done=True),
        "action_turn": action_turn(actions),
        "reasoning_turn": reasoning_turn(actions, REASONING_MAX_CHARS),
    }


def request_schemas(game: str, scaffold: Scaffold) -> dict[str, dict]:
    """Every JSON schema sent for ``game`` with ``scaffold``, by the name it is sent under: the turn
    schemas (``turn_constraints``) and the meta calls'. The diagnosis schema lists the evaluation
    seeds' episodes; a real one lists the diagnosed batch's."""
    episodes = [f"{game.replace(':', '-')}__seed{s}" for s in eval_seeds(game)]
    return {
        **{name: c.schema for name, c in turn_constraints(game, scaffold).items()},
        "diagnosis": diagnosis_schema(episodes, DIAGNOSIS_MAX_STEP),
        "revision": revision_schema(scaffold),
        "review": review_schema(CurationSettings().review_batch),
        "lora_settings": lora_schema(),
    }


@dataclass
class RoleCheck:
    """What one role's probe found; ``ok`` False means a round would fail on this role."""

    role: str
    base_url: str
    model: str
    mode: str
    ok: bool
    mode_derived: bool = False
    """``mode`` was derived from ``server`` (the file sets no ``constrained``)."""
    server_version: str | None = None
    reply_schema: str | None = None
    """Meta role: ``enforced`` (the server decoded under the schema) or ``described`` (it ignored
    ``response_format``; the reply followed the fields named in the prompt and is validated)."""
    reachable: bool | None = None
    honoured: bool | None = None
    latency_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    reply: str | None = None
    reason: str | None = None


def _probe_config(cfg: EndpointConfig) -> EndpointConfig:
    """The role's own settings, failing fast: a probe that waits out retries tells nothing more."""
    return cfg.model_copy(update={"max_retries": 0, "timeout_s": min(cfg.timeout_s, 60.0)})


def _messages(question: str) -> list[dict]:
    return [{"role": "system", "content": "You are a connectivity check."}, {"role": "user", "content": question}]


async def _probe(role: str, client) -> tuple[bool, str, object, str | None]:
    """Send the role's tiny request; ``(honoured, why not, completion, reply schema)``. With ``constrained: none``
    nothing constrains the reply, so the model is asked for a valid answer instead of a sentence."""
    free = client.config.constrained == "none"
    messages = _messages("Reply with any valid answer in the reply format." if free else OFF_FORMAT)
    if role == "meta" and client.config.meta_mode == "tools":
        return (*await _probe_tools(client), None)
    if role == "meta":
        return await _probe_meta(client)
    unapplied = "" if free else " (asked for a sentence: the server ignores the constraint it was sent)"
    if role == "memory":
        constraint = TurnFormats([OpName.APPEND, OpName.READ], 60, 20, 20).log_turn([PROBE_FILE], [PROBE_FILE], 2)
        comp = await ask(client, messages, constraint, max_tokens=80)
        parsed = parse_ops(comp.text)
        ok = bool(parsed.ops) and not parsed.errors
        return ok, "" if ok else f"the reply holds no valid memory operation{unapplied}: {comp.text[:120]!r}", comp, None
    comp = await ask(client, messages, action_turn(PROBE_ACTIONS), max_tokens=30)
    action = parse_ops(comp.text).action
    ok = action in PROBE_ACTIONS
    return ok, "" if ok else f"the reply holds no valid action{unapplied}: {comp.text[:120]!r}", comp, None


def _is_probe_reply(text: str) -> bool:
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and set(data) == {"ok"} and isinstance(data["ok"], bool)


async def _probe_meta(client) -> tuple[bool, str, object, str | None]:
    """The schema probe off format first: a reply that parses shows the server enforces the schema.
    Otherwise the same schema with its fields named in the prompt, as every meta call names them."""
    if client.config.constrained != "none":
        comp = await client.complete(_messages(OFF_FORMAT), json_schema=PROBE_SCHEMA, schema_name="probe",
                                     max_tokens=50)
        if _is_probe_reply(comp.text):
            return True, "", comp, "enforced"
    comp = await client.complete(_messages(describe_reply(PROBE_SCHEMA)), json_schema=PROBE_SCHEMA,
                                 schema_name="probe", max_tokens=50)
    if _is_probe_reply(comp.text):
        why = ("" if client.config.constrained == "none" else
               "the server ignores response_format: replies follow the fields the prompt names and are validated")
        return True, why, comp, "described"
    return (False, f"the reply is not the JSON object the schema asks for, even with its fields named: {comp.text[:120]!r}",
            comp, None)


async def _probe_tools(client) -> tuple[bool, str, object]:
    """A meta endpoint in ``meta_mode: tools`` must answer with a tool call (``meta/tool_session.py``)."""
    tool = {"type": "function", "function": {"name": "list_episodes", "description": "List the episodes of the batch.",
                                             "parameters": {"type": "object", "properties": {}}}}
    messages = [{"role": "user", "content": "Call the tool list_episodes."}]
    try:
        comp = await client.complete(messages, tools=[tool], max_tokens=50)
    except EndpointError as exc:
        raise EndpointError(f"{exc}; {NO_TOOLS_HINT}", exc.status) from exc
    ok = bool(comp.tool_calls)
    return ok, "" if ok else f"meta_mode tools, but the reply holds no tool call: {comp.text[:120]!r}; {NO_TOOLS_HINT}", comp


async def check_endpoints(config: EndpointsConfig, log_dir: Path, dry_run: bool = False) -> list[RoleCheck]:
    """Check every configured role; with ``dry_run`` only the file and the key variables."""
    roles = config.roles()
    checks = {}
    for role, cfg in roles.items():
        check = RoleCheck(role, cfg.base_url, cfg.model, cfg.constrained, ok=True, mode_derived=cfg.constrained_derived)
        try:
            cfg.api_key()
            if not dry_run:  # every replica, as connect() checks them all
                check.server_version = [check_server(cfg, url) for url in cfg.base_urls()][0]
        except EndpointConfigError as exc:
            check.ok, check.reason = False, str(exc)
        checks[role] = check
    # The rules meta has no server to probe; its row says so, so every role the file names is listed.
    rules = [RoleCheck("meta", "no server", RULES, RULES, ok=True, reason="the rules meta: no model and nothing to "
                       "reach")] if config.rules_meta is not None else []
    if dry_run or not all(c.ok for c in checks.values()):
        return list(checks.values()) + rules
    probe = config.model_copy(update={r: _probe_config(c) for r, c in roles.items()})
    rows = []
    async with connect(probe, log_dir) as clients:
        for role, check in checks.items():
            client = clients.game if role == "game" else getattr(clients, role) or clients.game
            # Each replica is probed on its own: the role's failover would hide a dead one.
            targets = client.replica_clients() if isinstance(client, ReplicatedClient) else [client]
            for target in targets:
                row = replace(check, base_url=target.base_url)
                await _fill(row, role, target)
                rows.append(row)
    return rows + rules


async def _fill(check: RoleCheck, role: str, client) -> None:
    """Probe one server of ``role`` and record what it did in ``check``."""
    start = time.perf_counter()
    try:
        honoured, why, comp, reply_schema = await _probe(role, client)
    except EndpointError as exc:
        check.ok, check.reachable, check.reason = False, exc.status is not None, str(exc)
        return
    check.reachable, check.honoured, check.ok = True, honoured, honoured
    check.reply_schema = reply_schema
    check.latency_s = round(time.perf_counter() - start, 3)
    check.input_tokens, check.output_tokens, check.reply = comp.input_tokens, comp.output_tokens, comp.text[:200]
    check.reason = why or None


def run_checks(config: EndpointsConfig, log_dir: Path, dry_run: bool = False) -> list[dict]:
    """``check_endpoints`` from synchronous code, as plain dictionaries."""
    return [asdict(c) for c in asyncio.run(check_endpoints(config, log_dir, dry_run))]
