"""The retrieval memory's records and its two searches: embedding (cosine) and lexical (BM25).

An episode holds at most a few hundred records, so both searches are exact. The embedding search
is a matrix-vector product over L2-normalised vectors in numpy: at these sizes it takes
microseconds, is exact by construction and ties break by step (``numpy.argsort``, stable), so a
replayed episode retrieves the same records. An approximate index (faiss, usearch, hnswlib)
would add a native dependency to save nothing here. The lexical search is ``bm25s`` (a
maintained BM25 package on numpy; Lucene's BM25 variant by default), rebuilt over the records
each step, which costs milliseconds at episode sizes.

A record is keyed by its observation: the query is the current observation, so the search
compares like with like, and the key is known before the step's action.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Record:
    """One past step: what was seen, what was done, what it earned; ``vector`` is its key's embedding."""

    step: int
    observation: str
    action: str
    reward: float
    vector: np.ndarray | None = None

    def text(self, fields: tuple[str, ...]) -> str:
        """The record as the prompt shows it, with only ``fields`` (``memory_settings.RECORD_FIELDS``)."""
        parts = [f"step {self.step}:"]
        if "observation" in fields:
            parts.append(self.observation.strip())
        if "action" in fields:
            parts.append(f"action: {self.action}")
        if "outcome" in fields:
            parts.append(f"outcome: earned {self.reward:+g}" if self.reward else "outcome: no reward")
        return "\n".join(parts)


@dataclass(frozen=True)
class Hit:
    record: Record
    score: float


def nearest_by_vector(records: list[Record], query: np.ndarray, k: int) -> list[Hit]:
    """The ``k`` records whose vectors are most similar to ``query`` (cosine), best first; ties go to the earlier step."""
    if not records or k < 1:
        return []
    matrix = np.stack([_unit(r.vector) for r in records])
    scores = matrix @ _unit(query)
    order = np.argsort(-scores, kind="stable")[:k]
    return [Hit(records[i], float(scores[i])) for i in order]


def nearest_by_bm25(records: list[Record], query: str, k: int) -> list[Hit]:
    """The ``k`` records whose observations score highest under BM25 for ``query``, best first;
    ties go to the earlier step. Records sharing no term with the query score 0 and still fill ``k``."""
    if not records or k < 1:
        return []
    import bm25s  # here, not at the top: it loads numba and scipy (0.4 s), which only this search needs

    index = bm25s.BM25()
    index.index(_tokens([r.observation for r in records]), show_progress=False)
    terms = [t for t in _tokens([query])[0] if t in index.vocab_dict]
    scores = index.get_scores(terms) if terms else np.zeros(len(records))
    order = np.argsort(-np.asarray(scores), kind="stable")[:k]
    return [Hit(records[i], float(scores[i])) for i in order]


def _tokens(texts: list[str]) -> list[list[str]]:
    """bm25s's own tokenizer (lowercased words, no stemming, no stop-word list: game text is short)."""
    import bm25s

    return bm25s.tokenize(texts, stopwords=None, return_ids=False, show_progress=False)


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


def encode_vector(vector: np.ndarray) -> str:
    """A vector as base64 of its float32 bytes: exact, and a quarter of its JSON list's size."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").copy()
