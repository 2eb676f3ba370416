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

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from automem_dagster.atomic import write_json_atomic, write_text_atomic
from automem_dagster.datafiles import parse_json_reply
from automem_dagster.llm.client import ContextOverflow, LLMClient
from automem_dagster.llm.config import EndpointConfig
from automem_dagster.llm.strict_schema import to_strict
from automem_dagster.llm.tokens import TokenCounter
from automem_dagster.meta.compress import RenderedBatch, ranges, render_for_diagnosis
from automem_dagster.meta.evidence import FAILURE_KINDS, Evidence, collect_evidence, tally
from automem_dagster.meta.replies import Attempt, describe_reply
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.scaffold.io import scaffold_yaml
from automem_dagster.scaffold.model import Scaffold

MAX_ATTEMPTS = 3
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

FindingKind = Literal[(*FAILURE_KINDS, "other")]

SYSTEM_PROMPT = """You are the meta-LLM of AutoMem. An agent plays a game with a file-based memory: \
each step it may run memory operations (LOG phase), read memory (PLAN phase) and choose an action. \
The memory scaffold (prompts, files and their policies, enabled operations, limits, warnings) decides \
how it uses memory. You read the agent's trajectories and the failure evidence computed from them, and \
diagnose where the scaffold made memory fail: wasted or redundant writes, searches that find nothing, \
stretches where the agent is stuck or moves back and forth, information it needed but never stored or \
never read, memory that grows without bound. Cite the episode and step of each finding, name the part \
of the scaffold that caused it, and propose a change to the scaffold (not to the game or the model). \
Reply with JSON only."""


class Finding(BaseModel):
    """One failure the meta-LLM explains, tied to an episode and step of the batch."""

    model_config = ConfigDict(extra="forbid")

    episode: str
    step: int = Field(ge=0)
    kind: FindingKind
    what_happened: str = Field(min_length=1, max_length=160)
    scaffold_cause: str = Field(min_length=1, max_length=160)
    proposed_change: str = Field(min_length=1, max_length=160)


class DiagnosisReply(BaseModel):
    """The reply; its bounds keep a constrained reply under about 1,000 tokens even when a small
    model pads every field with two-character tokens (it otherwise loops until max_tokens)."""

    model_config = ConfigDict(extra="forbid")

    summary: str = Field(min_length=10, max_length=300)
    findings: list[Finding] = Field(min_length=1, max_length=3)


@dataclass
class Diagnosis:
    """A stored diagnosis: the meta-LLM's findings with the evidence they rest on."""

    game: str
    scaffold_version: int
    batch_dir: str
    summary: str
    findings: list[dict]
    dropped: list[dict]
    evidence: dict
    compression_notes: list[str]
    attempts: list[Attempt] = field(default_factory=list)
    meta_mode: str = "one_call"
    tool_calls: list[dict] = field(default_factory=list)
    """``meta_mode: tools``: every tool call with its result size and the steps it showed (``tool_session``)."""
    cost: dict = field(default_factory=dict)
    """Requests, tokens and steps put in front of the model (``steps_read_count``), for comparing the modes."""

    def to_markdown(self) -> str:
        lines = [f"# Diagnosis of {self.game} scaffold v{self.scaffold_version}", "",
                 f"Batch: `{self.batch_dir}` ({len(self.evidence['episodes'])} episodes)", "", "## Summary", "",
                 self.summary, "", "## Findings", ""]
        for f in self.findings:
            lines += [f"- **{f['kind']}** at `{f['episode']}` step {f['step']}: {f['what_happened']}",
                      f"  - scaffold cause: {f['scaffold_cause']}", f"  - proposed change: {f['proposed_change']}"]
        if self.dropped:
            lines += ["", "Dropped findings (citations that do not exist in the batch):", ""]
            lines += [f"- `{d['finding'].get('episode')}` step {d['finding'].get('step')}: {d['reason']}" for d in self.dropped]
        lines += ["", "## Evidence (computed from the trajectories)", "", evidence_digest(self.evidence)]
        if self.compression_notes:
            lines += ["", "## What the meta-LLM saw", "", *[f"- {n}" for n in self.compression_notes]]
        if self.meta_mode == "tools":
            lines += ["", "## What the meta-LLM read (tool-using mode)", ""]
            lines += [f"- `{ep}` steps {steps}" for ep, steps in self.cost.get("steps_read", {}).items()] or ["- no step"]
            lines += [f"- {len(self.tool_calls)} tool calls: "
                      + ", ".join(f"{c['name']}({c['arguments']})" for c in self.tool_calls)]
        elif self.cost.get("steps_shown"):
            lines += ["", "## Steps the meta-LLM was shown (one-call mode)", ""]
            lines += [f"- `{ep}` steps {steps or 'none'}" for ep, steps in self.cost["steps_shown"].items()]
        lines += ["", f"Meta-LLM attempts: {len(self.attempts)}"]
        return "\n".join(lines) + "\n"

    def tracking_summary(self) -> dict:
        """What MLflow records of the diagnosis per round, so the two modes can be compared on a batch:
        the mode (a param) and, as metrics, tool calls, tokens of all requests and steps put in front
        of the model verbatim (unknown for a diagnosis recorded before the modes)."""
        cost = self.cost
        tokens_in = cost.get("input_tokens", sum(a.input_tokens for a in self.attempts))
        tokens_out = cost.get("output_tokens", sum(a.output_tokens for a in self.attempts))
        metrics = {"diagnosis_tool_calls": cost.get("tool_calls", 0), "diagnosis_input_tokens": tokens_in,
                   "diagnosis_output_tokens": tokens_out, "diagnosis_tokens": tokens_in + tokens_out}
        if "steps_read_count" in cost:
            metrics["diagnosis_steps_read"] = cost["steps_read_count"]
        return {"meta_mode": self.meta_mode, "metrics": metrics}

    def save(self, out_dir: Path) -> Path:
        """Write ``diagnosis.json`` and ``diagnosis.md`` (each atomically) and return the directory."""
        out = Path(out_dir)
        write_json_atomic(out / "diagnosis.json", asdict(self))
        write_text_atomic(out / "diagnosis.md", self.to_markdown())
        return out

    @classmethod
    def load(cls, out_dir: Path) -> Diagnosis:
        path = Path(out_dir) / "diagnosis.json"
        try:
            data = json.loads(path.read_text())
            data["attempts"] = [Attempt(**a) for a in data["attempts"]]
            return cls(**data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise DiagnosisError(f"{path}: not a readable diagnosis ({exc}); rerun `automem diagnose` for its batch") from exc


class DiagnosisError(RuntimeError):
    """No diagnosis could be made; the message says why and where the replies were kept."""


def evidence_digest(evidence: dict) -> str:
    """The evidence as a few readable lines: failure kinds, file usage, context growth."""
    points = evidence["failure_points"]
    lines = [f"- failure points: {len(points)} ({tally(p['kind'] for p in points) or 'none'})"]
    for name, usage in evidence["files"].items():
        lines.append(f"- file `{name}`: {usage['reads']} reads, {usage['writes']} writes "
                     f"({usage['redundant_writes']} redundant), {usage['refused']} refused")
    if evidence["never_read"]:
        lines.append(f"- never read: {', '.join(evidence['never_read'])}")
    if evidence["never_written"]:
        lines.append(f"- never written: {', '.join(evidence['never_written'])}")
    for e in evidence["episodes"]:
        c = e["context"]
        lines.append(f"- {e['episode']}: {e['steps']} steps, progression {100 * e['progression']:.1f}%, input tokens/step "
                     f"{c['start_tokens_per_step']:.0f} -> {c['end_tokens_per_step']:.0f}")
    return "\n".join(lines)


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


def check_citations(reply: DiagnosisReply, evidence: Evidence) -> tuple[list[dict], list[dict]]:
    """Split findings into those citing a real episode and step, and dropped ones with the reason."""
    steps = {e.episode: e.steps for e in evidence.episodes}
    kept, dropped = [], []
    for f in reply.findings:
        data = f.model_dump()
        if f.episode not in steps:
            dropped.append({"finding": data, "reason": f"no episode {f.episode!r} in the batch"})
        elif f.step >= steps[f.episode]:
            dropped.append({"finding": data, "reason": f"{f.episode} has steps 0-{steps[f.episode] - 1}"})
        else:
            kept.append(data)
    return kept, dropped


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
        from automem_dagster.meta.tool_diagnosis import diagnose_with_tools  # it builds on this module

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
        messages += [{"role": "assistant", "content": completion.text},
                     {"role": "user", "content": f"That reply was rejected: {error}. Reply again with valid JSON."}]
    failed = Path(out_dir) / "diagnosis_failed.json"
    write_json_atomic(failed, [asdict(a) for a in attempts])
    raise DiagnosisError(f"the meta-LLM gave no usable diagnosis in {max_attempts} attempts (last: {attempts[-1].error}); "
                         f"its replies are in {failed}. Try a stronger meta endpoint or rerun")


__all__ = ["Diagnosis", "DiagnosisError", "DiagnosisReply", "Finding", "diagnose", "evidence_digest", "reply_schema"]
