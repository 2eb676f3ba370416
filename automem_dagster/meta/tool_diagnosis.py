"""Diagnosis in the tool-using mode (``meta_mode: tools`` on the meta endpoint).

Instead of one request holding the batch compressed to the context (``diagnose.diagnose``, which
hands ``meta_mode: tools`` to this module), the meta-LLM starts from the evidence digest and reads
what it needs through read-only tools (``batch_tools.py``, conversation and bounds in
``tool_session.py``). Its reply is the same JSON as in the one-call mode and is checked the same
way (``diagnosis_record.py``), plus one rule only this mode can enforce: every finding must cite a
step the model read or a tool showed it. A reply citing any other step is rejected with that
reason and asked again (the model may read the step first), as an invalid patch is. The record
(``diagnosis.json``) keeps every tool call with its result size and the steps read, and
``diagnosis.md`` lists them, so a reader can check what the meta-LLM based its findings on.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.datafiles import parse_json_reply
from automem_dagster.llm.client import LLMClient
from automem_dagster.meta.batch_tools import BatchTools
from automem_dagster.meta.diagnosis_record import (
    DIAGNOSIS_FAILED_FILE,
    SYSTEM_PROMPT,
    Diagnosis,
    DiagnosisError,
    DiagnosisReply,
    check_citations,
)
from automem_dagster.meta.evidence import evidence_digest
from automem_dagster.meta.replies import Attempt
from automem_dagster.meta.tool_session import NO_TOOLS_HINT, BudgetSpent, ToolSession, ToolsUnsupported, after_tools_hint
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.scaffold.model import Scaffold

TOOLS_PROMPT = """You have read-only tools over the batch: list the episodes, read steps verbatim, \
search steps, read a memory file as it stood at a step, read the evidence and the scaffold. Look \
where the failures are before you diagnose. Cite only steps you read or a tool showed you; a finding \
citing any other step is rejected. When you are done, reply with the diagnosis JSON as text \
(no tool call): {"summary": "...", "findings": [{"episode", "step", "kind", "what_happened", \
"scaffold_cause", "proposed_change"}]}, 1 to 3 findings, each text under 160 characters."""


def tool_messages(scaffold: Scaffold, digest: str, episodes: int, steps: int) -> list[dict]:
    user = (f"Game: {scaffold.game}. Scaffold version {scaffold.version}. The batch: {episodes} episode(s), "
            f"{steps} steps in all.\n\nEvidence computed from the trajectories:\n{digest}\n\n"
            "Diagnose this batch: use the tools to read what you need, then reply with the diagnosis JSON.")
    return [{"role": "system", "content": SYSTEM_PROMPT + "\n\n" + TOOLS_PROMPT}, {"role": "user", "content": user}]


def unseen_citations(reply: DiagnosisReply, session: ToolSession) -> list[str]:
    """Why each finding citing a step the model neither read nor was shown is refused."""
    return [f"{f.episode} step {f.step} was never read or shown to you (you read: "
            f"{session.summary()['steps_read'].get(f.episode, 'nothing of it')})"
            for f in reply.findings if not session.seen(f.episode, f.step)]


async def diagnose_with_tools(batch_dir: Path, scaffold: Scaffold, client: LLMClient, out_dir: Path,
                              max_attempts: int, parent: Scaffold | None = None) -> Diagnosis:
    """Diagnose ``batch_dir`` through tool calls and save it in ``out_dir`` (``diagnose.diagnose`` hands a
    ``meta_mode: tools`` endpoint here); ``max_attempts`` bounds the replies (not the tool calls:
    ``meta_tool_calls`` and ``meta_token_budget`` do). Raises ``DiagnosisError`` with the replies kept in
    ``out_dir/diagnosis_failed.json``."""
    batch = Path(batch_dir)
    paths = finished_episodes(batch)
    if not paths:
        raise DiagnosisError(f"{batch}: no finished trajectories to diagnose; run or resume the rollout first")
    tools = BatchTools.of_episodes(paths, scaffold, parent)
    evidence = tools.evidence
    messages = tool_messages(scaffold, evidence_digest(evidence.as_dict()), len(paths),
                             sum(e.steps for e in evidence.episodes))
    session = ToolSession(client, tools, messages)
    attempts: list[Attempt] = []
    while len(attempts) < max_attempts:
        try:
            completion = await session.ask()
        except BudgetSpent as exc:
            _fail(out_dir, attempts, session, f"{exc}. Tool calls and replies are in ")
        except ToolsUnsupported as exc:
            raise DiagnosisError(str(exc)) from exc
        reply, error = parse_json_reply(completion.text, DiagnosisReply)
        if reply is not None:
            kept, dropped = check_citations(reply, evidence)
            unseen = unseen_citations(reply, session)
            if unseen:
                fix = "cite only steps you read" if session.stops else "read it with read_steps first, or cite a step you read"
                error = "a finding cites a step you never read: " + "; ".join(unseen) + f". {fix.capitalize()}"
        attempts.append(Attempt.of(completion, error))
        if error is None:
            result = Diagnosis(game=scaffold.game, scaffold_version=scaffold.version, batch_dir=str(batch),
                               summary=reply.summary, findings=kept, dropped=dropped, evidence=evidence.as_dict(),
                               compression_notes=[], attempts=attempts, meta_mode="tools",
                               tool_calls=[asdict(c) for c in session.calls], cost=session.summary())
            result.save(out_dir)
            return result
        messages += [{"role": "assistant", "content": completion.text},
                     {"role": "user", "content": f"That reply was rejected: {error}. Reply again with valid JSON."}]
    hint = f"; {NO_TOOLS_HINT}" if not session.calls else after_tools_hint(client.config.server, bool(session.stops))
    _fail(out_dir, attempts, session, f"the meta-LLM gave no usable diagnosis in {max_attempts} attempts "
          f"(last: {attempts[-1].error}; it made {len(session.calls)} tool calls{hint}); its replies are in ")


def _fail(out_dir: Path, attempts: list[Attempt], session: ToolSession, message: str) -> None:
    failed = Path(out_dir) / DIAGNOSIS_FAILED_FILE
    write_json_atomic(failed, {"attempts": [asdict(a) for a in attempts],
                               "tool_calls": [asdict(c) for c in session.calls], "cost": session.summary()})
    raise DiagnosisError(f"{message}{failed}")
