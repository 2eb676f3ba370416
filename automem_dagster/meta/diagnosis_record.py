"""What both diagnosis modes share: the meta-LLM's instructions, the reply it must give, the check of
that reply's citations against the batch, and the stored record.

The one-call mode (``diagnose.py``) and the tool-using mode (``tool_diagnosis.py``) differ only in
how the meta-LLM sees the batch; what it answers, how the answer is checked and how it is kept are
the same, so they live here and neither mode imports the other's module for them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from automem_dagster.atomic import write_json_atomic, write_text_atomic
from automem_dagster.meta.evidence import FAILURE_KINDS, Evidence, evidence_digest
from automem_dagster.meta.replies import Attempt
from automem_dagster.options import BUDGET

DIAGNOSIS_FILE = "diagnosis.json"
DIAGNOSIS_MD_FILE = "diagnosis.md"
DIAGNOSIS_FAILED_FILE = "diagnosis_failed.json"
"""What a diagnosis that found no usable reply leaves instead of ``diagnosis.json``."""

MAX_ATTEMPTS = BUDGET.max_attempts
"""Replies a diagnosis asks for at most, in either mode, before it gives up with the replies kept."""

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
        write_json_atomic(out / DIAGNOSIS_FILE, asdict(self))
        write_text_atomic(out / DIAGNOSIS_MD_FILE, self.to_markdown())
        return out

    @classmethod
    def load(cls, out_dir: Path) -> Diagnosis:
        path = Path(out_dir) / DIAGNOSIS_FILE
        try:
            data = json.loads(path.read_text())
            data["attempts"] = [Attempt(**a) for a in data["attempts"]]
            return cls(**data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise DiagnosisError(f"{path}: not a readable diagnosis ({exc}); rerun `automem diagnose` for its batch") from exc


class DiagnosisError(RuntimeError):
    """No diagnosis could be made; the message says why and where the replies were kept."""


class NoUsableDiagnosis(DiagnosisError):
    """The meta-LLM answered, but no reply within the attempts was a valid diagnosis: the model's output, not
    the set-up, failed, so a round ends its revision there (no candidate) instead of failing."""


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
