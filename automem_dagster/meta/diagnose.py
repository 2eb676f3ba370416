"""Diagnosis: the meta-LLM reads a rollout batch and says where the scaffold made memory fail.

The facts come first and come from code (``evidence.collect_evidence``): failure points, file
usage, context growth. The meta-LLM then reads the batch, compressed to its context if needed
(``compress.render_for_diagnosis``; tokens counted by the endpoint's own server where it can,
``llm/tokens.py``, and the budget in ``docs/meta-input-budget.md``), and explains those failures in terms of the scaffold,
citing episodes and steps. Its reply is constrained to a JSON schema built for the batch (the
episode names are an enum, steps are bounded) and validated again here: a finding that cites
a step the episode does not have is dropped with the reason kept, and a reply with no usable
finding is asked again a bounded number of times. Every reply is kept in the record, so a
bad diagnosis can be read back instead of vanishing.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.datafiles import parse_json_reply
from automem_dagster.llm.client import ContextOverflow, LLMClient
from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.strict_schema import to_strict
from automem_dagster.llm.tokens import TokenCounter
from automem_dagster.meta.compress import RenderedBatch, ranges, render_for_diagnosis
from automem_dagster.meta.diagnosis_record import (
    DIAGNOSIS_FAILED_FILE,
    MAX_ATTEMPTS,
    SYSTEM_PROMPT,
    Diagnosis,
    DiagnosisError,
    DiagnosisReply,
    NoUsableDiagnosis,
    check_citations,
)
from automem_dagster.meta.evidence import Evidence, collect_evidence, evidence_digest
from automem_dagster.meta.replies import Attempt, ask_again, describe_reply
from automem_dagster.meta.tool_diagnosis import diagnose_with_tools
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.scaffold.io import scaffold_yaml
from automem_dagster.scaffold.model import Scaffold

MIN_BUDGET = 200
"""Tokens below which the rendered batch would say too little to diagnose from."""
INPUT_SHARE = 0.5
"""Share of the context left for the rendered batch after the reply and the fixed prompt when
tokens are estimated (chars/4): it undercounts ASCII maps, so half is the margin that keeps the
call in context."""
MAX_STEP_ENUM = 500
"""Steps a reply schema lists at most; OpenAI's structured outputs allow 1,000 enum values in a schema
(platform.openai.com/docs/guides/structured-outputs, "Objects have limitations on nesting depth and size")."""
MARGIN_TOKENS = 32
"""With exact counts, what is kept free besides the reply: the batch and the prompt around it
are counted apart, and tokens may merge differently where they meet."""

def reply_schema(episodes: list[str], max_step: int, steps: list[int] | None = None) -> dict:
    """The reply's JSON schema, narrowed to a batch: its episodes by name, steps 0..``max_step``, or
    only ``steps`` when given (the steps a compressed batch showed)."""
    schema = DiagnosisReply.model_json_schema()
    finding = schema["$defs"]["Finding"]["properties"]
    finding["episode"] = {"type": "string", "enum": list(episodes)}
    finding["step"] = ({"type": "integer", "enum": steps} if steps else
                       {"type": "integer", "minimum": 0, "maximum": max_step})
    return to_strict(schema)


def batch_reply_schema(evidence: Evidence, rendered: RenderedBatch | None = None) -> dict:
    """``reply_schema`` for the batch; when ``rendered`` was compressed, steps are limited to those it
    showed (of any episode, up to ``MAX_STEP_ENUM``), so a constrained model cannot cite a step it never saw."""
    shown = sorted(set().union(*rendered.shown.values())) if rendered is not None and rendered.shown else None
    return reply_schema([e.episode for e in evidence.episodes], max(e.steps for e in evidence.episodes) - 1,
                        shown if shown and len(shown) <= MAX_STEP_ENUM else None)


def unshown_citations(findings: list[dict], rendered: RenderedBatch) -> str | None:
    """Why a reply is refused when a finding cites a step the compressed batch summarised away or
    omitted (the model cannot have seen what happened there), naming the steps it was shown."""
    unshown = [f"{f['episode']} step {f['step']} was summarised away or omitted (shown verbatim: "
               f"{ranges(rendered.shown.get(f['episode'], ())) or 'no step of it'})"
               for f in findings if not rendered.was_shown(f["episode"], f["step"])]
    if not unshown:
        return None
    return "a finding cites a step that was never shown to you: " + "; ".join(unshown) + ". Cite only steps shown verbatim"


def prompt_parts(scaffold: Scaffold, evidence: Evidence) -> tuple[str, str]:
    """The user prompt's text before the rendered batch (scaffold, evidence) and after it (the ask, which
    names every field of the reply: a provider that ignores ``response_format`` learns them only here)."""
    head = (f"Game: {scaffold.game}. Scaffold version {scaffold.version}:\n```yaml\n{scaffold_yaml(scaffold)}```\n\n"
            f"Evidence computed from the trajectories:\n{evidence_digest(evidence.as_dict())}\n\nTrajectories:\n")
    ask = ("\n\nDiagnose this batch: a summary, then findings that each cite an episode and a step shown above, "
           "the scaffold part that caused it, and a proposed scaffold change.\n"
           + describe_reply(batch_reply_schema(evidence)))
    return head, ask


def diagnosis_messages(prompt: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]


def input_budget(cfg: EndpointConfig, counter: TokenCounter, prompt: str) -> int:
    """Tokens the rendered batch may take: the endpoint's ``context_tokens`` less its reply's
    ``max_tokens`` and the fixed prompt (system prompt, scaffold, evidence, chat template), less
    ``MARGIN_TOKENS`` when the server counts, or halved (``INPUT_SHARE``) when chars/4 estimates."""
    fixed = counter.count_messages(diagnosis_messages(prompt))
    room = cfg.context_tokens - cfg.max_tokens - fixed
    budget = room - MARGIN_TOKENS if counter.exact else int(room * INPUT_SHARE)
    if budget < MIN_BUDGET:
        raise DiagnosisError(f"endpoint {cfg.name!r}: context_tokens {cfg.context_tokens} leaves no room for trajectories "
                             f"after max_tokens {cfg.max_tokens} and the scaffold ({fixed} tokens, {counter.method}); "
                             "raise context_tokens or lower max_tokens")
    return budget


def fit_messages(paths: list[Path], evidence: Evidence, budget: int, counter: TokenCounter, cfg: EndpointConfig,
                 head: str, ask: str) -> RenderedBatch:
    """The batch rendered within ``budget``; with exact counts the whole request is counted once
    more, and a request still over the context (the parts merge into fewer or more tokens than
    counted apart) is rendered again in a budget smaller by the overshoot."""
    rendered = render_for_diagnosis(paths, evidence, budget, counter=counter)
    for _ in range(3):
        if not counter.exact:
            return rendered
        over = counter.count_messages(diagnosis_messages(head + rendered.text + ask)) + cfg.max_tokens - cfg.context_tokens
        if over <= 0:
            return rendered
        budget -= over + MARGIN_TOKENS
        if budget < MIN_BUDGET:
            break
        rendered = render_for_diagnosis(paths, evidence, budget, counter=counter)
    return rendered


def one_call_cost(attempts: list[Attempt], evidence: Evidence, rendered: RenderedBatch) -> dict:
    """What the one-call diagnosis cost and how much of the batch it showed verbatim."""
    return {"requests": len(attempts), "tool_calls": 0, "input_tokens": sum(a.input_tokens for a in attempts),
            "output_tokens": sum(a.output_tokens for a in attempts), "batch_tokens": rendered.tokens,
            "steps_read_count": sum(e.steps for e in evidence.episodes) - rendered.omitted_steps,
            "steps_shown": {e.episode: ranges(range(e.steps)) if rendered.shown is None else ranges(rendered.shown.get(
                e.episode, ())) for e in evidence.episodes}}


async def diagnose(batch_dir: Path, scaffold: Scaffold, client: LLMClient, out_dir: Path,
                   max_attempts: int = MAX_ATTEMPTS, parent: Scaffold | None = None) -> Diagnosis:
    """Diagnose one finished rollout batch of ``scaffold`` and save it in ``out_dir``; with the meta
    endpoint's ``meta_mode: tools`` through tool calls (``tool_diagnosis``; ``parent`` is then the
    scaffold ``read_scaffold`` diffs against). Raises
    ``DiagnosisError`` when the batch has no finished episode or no reply within ``max_attempts``
    yields a usable finding; the replies are then saved in ``out_dir/diagnosis_failed.json``."""
    if client.config.meta_mode == "tools":
        return await diagnose_with_tools(batch_dir, scaffold, client, out_dir, max_attempts, parent)
    batch = Path(batch_dir)
    paths = finished_episodes(batch)
    if not paths:
        raise DiagnosisError(f"{batch}: no finished trajectories to diagnose; run or resume the rollout first")
    evidence = collect_evidence(paths, [f.name for f in scaffold.files])
    head, ask = prompt_parts(scaffold, evidence)
    counter = TokenCounter.for_client(client)
    budget = input_budget(client.config, counter, head + ask)
    rendered = fit_messages(paths, evidence, budget, counter, client.config, head, ask)
    messages = diagnosis_messages(head + rendered.text + ask)
    attempts: list[Attempt] = []
    while len(attempts) < max_attempts:
        try:
            completion = await client.complete(messages, json_schema=batch_reply_schema(evidence, rendered),
                                               schema_name="diagnosis")
        except ContextOverflow as exc:
            # chars/4 underestimates dense text such as ASCII maps: render again in half the budget.
            if budget // 2 < MIN_BUDGET:
                raise DiagnosisError(f"{exc}, even with the trajectories compressed to {budget} tokens "
                                     f"({counter.method}): "
                                     f"raise the endpoint's context (context_tokens, embedded_ctx_per_slot)") from exc
            budget //= 2
            rendered = render_for_diagnosis(paths, evidence, budget, counter=counter)
            messages[1]["content"] = head + rendered.text + ask
            continue
        reply, error = parse_json_reply(completion.text, DiagnosisReply)
        if reply is not None:
            kept, dropped = check_citations(reply, evidence)
            if not kept:
                error = "every finding cites an episode or step not in the batch: " + "; ".join(d["reason"] for d in dropped)
            else:
                error = unshown_citations(kept, rendered)
        attempts.append(Attempt.of(completion, error))
        if error is None:
            result = Diagnosis(game=scaffold.game, scaffold_version=scaffold.version, batch_dir=str(batch),
                               summary=reply.summary, findings=kept, dropped=dropped, evidence=evidence.as_dict(),
                               compression_notes=rendered.notes + ([counter.note] if counter.note else []),
                               attempts=attempts, cost=one_call_cost(attempts, evidence, rendered))
            result.save(out_dir)
            return result
        ask_again(messages, 2, completion.text, f"That reply was rejected: {error}. Reply again with valid JSON.")
    failed = Path(out_dir) / DIAGNOSIS_FAILED_FILE
    write_json_atomic(failed, [asdict(a) for a in attempts])
    raise NoUsableDiagnosis(f"the meta-LLM gave no usable diagnosis in {max_attempts} attempts (last: {attempts[-1].error}); "
                         f"its replies are in {failed}. Try a stronger meta endpoint or rerun")


# Diagnosis and DiagnosisError are what ``diagnose`` returns and raises (defined in ``diagnosis_record``).
__all__ = ["Diagnosis", "DiagnosisError", "NoUsableDiagnosis", "diagnose", "reply_schema"]
