"""One example of the specialist's SFT dataset, the row curation writes and training reads.

Curation (``meta/curate.py``) builds every row as an ``SFTRow`` and training (``training/examples.py``)
validates every row of ``dataset.parquet`` against the same model, so a row the writer makes is a row
the reader takes, and a malformed one is refused by name before any model loads. The row is trl's
conversational prompt/completion format plus provenance: the decision's episode, seed, step, phase
and turn, its cheap score, and its effect with the unit, how it was measured (``replayed`` or
``unmeasured``) and the window; datasets curated before effects were measured lack those four, so
they are optional here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, model_validator


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: StrictStr


class SFTRow(BaseModel):
    """A prompt (chat messages ending with the user's) and the one assistant message that answers it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: list[ChatMessage] = Field(min_length=1)
    completion: list[ChatMessage] = Field(min_length=1)
    episode: StrictStr
    seed: StrictInt
    step: StrictInt
    phase: Literal["log", "plan"]
    turn: StrictInt
    score: StrictFloat
    effect: StrictFloat | None = None
    effect_unit: StrictStr | None = None
    effect_method: Literal["replayed", "unmeasured"] | None = None
    window: StrictInt | None = None

    @model_validator(mode="after")
    def _a_turn_of_chat(self) -> SFTRow:
        roles = [m.role for m in self.prompt]
        if "system" in roles[1:]:
            raise ValueError(f"prompt roles {roles}: a system message may only come first")
        if roles[-1] != "user":
            raise ValueError(f"prompt roles {roles}: the prompt must end with a user message (the completion answers it)")
        if [m.role for m in self.completion] != ["assistant"]:
            raise ValueError(f"completion roles {[m.role for m in self.completion]}: expected exactly ['assistant']")
        if not self.completion[0].content.strip():
            raise ValueError("the completion is empty")
        return self


PROVENANCE = ("effect", "effect_unit", "effect_method", "window")
"""The fields training does not read (the card and the run's record do)."""
REQUIRED_COLUMNS = tuple(name for name in SFTRow.model_fields if name not in PROVENANCE)


def row_problem(row: dict) -> str | None:
    """What is wrong with ``row`` as an ``SFTRow``, in words (the first problem found), or None."""
    try:
        SFTRow.model_validate(row)
    except ValueError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"`{where}`: {first['msg']} (got {first['input']!r:.80})" if where else first["msg"].removeprefix(
            "Value error, ")
    return None
