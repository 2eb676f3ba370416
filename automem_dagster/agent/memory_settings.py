"""The settings of the two memory baselines, ``rag`` and ``summary``, as one plain dict per batch.

A batch records its agent's settings (``batch.json``, trajectory headers, the MLflow run, the
batch directory's name), so two batches with different ``k`` or summary cadence are never
mistaken for one. The dict form is what is recorded; the dataclasses check it and fill defaults.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Literal

RECORD_FIELDS = ("observation", "action", "outcome")
"""What a retrieval record can hold: the step's observation, the action taken, what it earned."""

Retriever = Literal["embedding", "bm25"]
RETRIEVERS = ("embedding", "bm25")


@dataclass(frozen=True)
class RagSettings:
    """``retriever``: ``embedding`` (the ``embed`` endpoint, cosine similarity) or ``bm25`` (lexical,
    no model); ``k``: records put in the prompt; ``record``: the fields a retrieved record shows."""

    retriever: Retriever = "embedding"
    k: int = 4
    record: tuple[str, ...] = RECORD_FIELDS

    def __post_init__(self) -> None:
        if self.retriever not in RETRIEVERS:
            raise ValueError(f"rag retriever {self.retriever!r}: expected one of {', '.join(RETRIEVERS)}")
        if not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"rag k {self.k!r}: retrieve 1 or more records per step")
        unknown = [f for f in self.record if f not in RECORD_FIELDS]
        if unknown or not self.record or len(set(self.record)) != len(self.record):
            raise ValueError(f"rag record {','.join(self.record)!r}: name each of {', '.join(RECORD_FIELDS)} "
                             "at most once, at least one")
        object.__setattr__(self, "record", tuple(f for f in RECORD_FIELDS if f in self.record))

    def slug(self) -> str:
        return f"{self.retriever}-k{self.k}-" + "".join(f[0] for f in self.record)


@dataclass(frozen=True)
class SummarySettings:
    """``every``: steps between two rewrites of the running summary; ``summary_tokens``: its cap."""

    every: int = 8
    summary_tokens: int = 128

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"summary every {self.every!r}: rewrite the summary every 1 or more steps")
        if not isinstance(self.summary_tokens, int) or not 16 <= self.summary_tokens <= 4096:
            raise ValueError(f"summary_tokens {self.summary_tokens!r}: the cap must be 16 to 4096 tokens")

    def slug(self) -> str:
        return f"every{self.every}-cap{self.summary_tokens}"


SETTINGS = {"rag": RagSettings, "summary": SummarySettings}
"""The agents with settings beyond ``window``, and the class that checks them."""


def settings_for(agent: str, given: dict | None) -> RagSettings | SummarySettings | None:
    """``given`` checked and completed with defaults for ``agent`` (None for an agent without settings)."""
    kind = SETTINGS.get(agent)
    given = dict(given or {})
    if kind is None:
        if given:
            raise ValueError(f"agent {agent!r} takes no settings, got {sorted(given)}: drop them")
        return None
    names = {f.name for f in fields(kind)}
    unknown = sorted(set(given) - names)
    if unknown:
        raise ValueError(f"{agent} settings {unknown}: expected some of {sorted(names)}")
    if "record" in given:
        given["record"] = tuple(given["record"])
    return kind(**given)


def settings_record(settings: RagSettings | SummarySettings | None) -> dict:
    """The settings as batch.json records them (``record`` as a list), empty for an agent without any."""
    if settings is None:
        return {}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(settings).items()}


def needs_embed(agent: str, settings: dict | None) -> bool:
    """Whether a batch of ``agent`` searches by embeddings (the rag baseline's default retriever), so its
    session must open the ``embed`` endpoint."""
    return agent == "rag" and settings_for(agent, settings).retriever == "embedding"
