"""Check an endpoints file before a round, and list every JSON schema the project sends.

A round that fails on its first meta call after an hour of rollouts has wasted the hour, so a
user checks the file first: every role's key variable, then (unless it is a dry run) one tiny
request per role in the mode that role will use (a one-action turn for the game model, a LOG
turn for the memory model, a strict JSON reply for the meta-LLM) and whether the reply parses.
The schemas are listed so a user can try them against a provider by hand.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from automem_dagster.agent.baselines import REASONING_MAX_CHARS
from automem_dagster.agent.turn_format import TurnFormats, action_turn, ask, reasoning_turn
from automem_dagster.games import make_game
from automem_dagster.llm.client import EndpointError
from automem_dagster.llm.config import EndpointConfig, EndpointConfigError, EndpointsConfig
from automem_dagster.llm.replicas import ReplicatedClient
from automem_dagster.llm.session import connect
from automem_dagster.llm.strict_schema import to_strict
from automem_dagster.memory import OpName, parse_ops
from automem_dagster.meta.curate import CurationSettings, review_schema
from automem_dagster.meta.diagnose import reply_schema as diagnosis_schema
from automem_dagster.meta.lora_config import reply_schema as lora_schema
from automem_dagster.meta.revise import revision_schema
from automem_dagster.meta.tool_session import NO_TOOLS_HINT
from automem_dagster.rollout.seeds import eval_seeds
from automem_dagster.scaffold.model import Scaffold

PROBE_ACTIONS = ["north", "south"]
PROBE_FILE = "notes.txt"
PROBE_SCHEMA = to_strict({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
DIAGNOSIS_MAX_STEP = 999
"""The step bound shown for the diagnosis schema; a real call narrows it to the batch's steps."""


def request_schemas(game: str, scaffold: Scaffold) -> dict[str, dict]:
    """Every JSON schema sent for ``game`` with ``scaffold``, by the name it is sent under.

    Turn schemas are shown for the scaffold's initial files with the full operation budget; a
    real turn narrows the enums to the files the store holds then. The diagnosis schema lists
    the evaluation seeds' episodes; a real one lists the diagnosed batch's."""
    env = make_game(game)
    try:
        actions = list(env.actions())
    finally:
        env.close()
    formats = TurnFormats(scaffold.operations, scaffold.limits.text_max_chars, scaffold.limits.key_max_chars,
                          scaffold.limits.keyword_max_chars)
    files = [f.name for f in scaffold.files]
    writable = scaffold.model_writable_files()
    episodes = [f"{game.replace(':', '-')}__seed{s}" for s in eval_seeds(game)]
    return {
        "log_turn": formats.log_turn(files, writable, scaffold.limits.log_max_ops).schema,
        "plan_turn": formats.plan_turn(files, actions, consult=True).schema,
        "plan_turn_memory_model": formats.plan_turn(files, actions, consult=True, end_with_done=True).schema,
        "action_turn": action_turn(actions).schema,
        "reasoning_turn": reasoning_turn(actions, REASONING_MAX_CHARS).schema,
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


async def _probe(role: str, client) -> tuple[bool, str, object]:
    """Send the role's tiny request; ``(honoured, why not, completion)``."""
    messages = [{"role": "system", "content": "You are a connectivity check. Follow the reply format."},
                {"role": "user", "content": "Reply with any valid answer."}]
    if role == "meta" and client.config.meta_mode == "tools":
        return await _probe_tools(client)
    if role == "meta":
        comp = await client.complete(messages, json_schema=PROBE_SCHEMA, schema_name="probe", max_tokens=50)
        try:
            ok = isinstance(json.loads(comp.text).get("ok"), bool)
        except (ValueError, AttributeError):
            ok = False
        return ok, "" if ok else "the reply is not the JSON object the schema asks for", comp
    if role == "memory":
        constraint = TurnFormats([OpName.APPEND, OpName.READ], 60, 20, 20).log_turn([PROBE_FILE], [PROBE_FILE], 2)
        comp = await ask(client, messages, constraint, max_tokens=80)
        parsed = parse_ops(comp.text)
        ok = bool(parsed.ops) and not parsed.errors
        return ok, "" if ok else f"the reply holds no valid memory operation: {comp.text[:120]!r}", comp
    comp = await ask(client, messages, action_turn(PROBE_ACTIONS), max_tokens=30)
    action = parse_ops(comp.text).action
    ok = action in PROBE_ACTIONS
    return ok, "" if ok else f"the reply holds no valid action: {comp.text[:120]!r}", comp


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
        check = RoleCheck(role, cfg.base_url, cfg.model, cfg.constrained, ok=True)
        try:
            cfg.api_key()
        except EndpointConfigError as exc:
            check.ok, check.reason = False, str(exc)
        checks[role] = check
    if dry_run or not all(c.ok for c in checks.values()):
        return list(checks.values())
    probe = config.model_copy(update={r: _probe_config(c) for r, c in roles.items()})
    rows = []
    async with connect(probe, log_dir) as clients:
        for role, check in checks.items():
            if roles[role].rules:
                check.reason = "the rules meta: no model and nothing to reach"
                continue
            client = clients.game if role == "game" else getattr(clients, role) or clients.game
            # Each replica is probed on its own: the role's failover would hide a dead one.
            targets = client.replica_clients() if isinstance(client, ReplicatedClient) else [client]
            for target in targets:
                row = replace(check, base_url=target.base_url)
                await _fill(row, role, target)
                rows.append(row)
    return rows


async def _fill(check: RoleCheck, role: str, client) -> None:
    """Probe one server of ``role`` and record what it did in ``check``."""
    start = time.perf_counter()
    try:
        honoured, why, comp = await _probe(role, client)
    except EndpointError as exc:
        check.ok, check.reachable, check.reason = False, exc.status is not None, str(exc)
        return
    check.reachable, check.honoured, check.ok = True, honoured, honoured
    check.latency_s = round(time.perf_counter() - start, 3)
    check.input_tokens, check.output_tokens, check.reply = comp.input_tokens, comp.output_tokens, comp.text[:200]
    check.reason = why or None


def run_checks(config: EndpointsConfig, log_dir: Path, dry_run: bool = False) -> list[dict]:
    """``check_endpoints`` from synchronous code, as plain dictionaries."""
    return [asdict(c) for c in asyncio.run(check_endpoints(config, log_dir, dry_run))]
