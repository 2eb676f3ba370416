"""Every meta-LLM call is kept for the record, accepted or not, so a bad diagnosis or revision
can be read back instead of vanishing (parsing is ``datafiles.parse_json_reply``)."""

from __future__ import annotations

from dataclasses import dataclass

from automem_dagster.llm.client import Completion


@dataclass(frozen=True)
class Attempt:
    """One meta-LLM call: its reply, why it was not accepted (None when it was), and its cost."""

    reply: str
    error: str | None
    input_tokens: int
    output_tokens: int
    latency_s: float

    @classmethod
    def of(cls, completion: Completion, error: str | None) -> Attempt:
        return cls(completion.text, error, completion.input_tokens, completion.output_tokens, round(completion.latency_s, 3))
