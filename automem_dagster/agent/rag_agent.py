"""The ``rag`` baseline: retrieval memory, "a vector store plus a careful prompt".

Every step becomes a record (observation, action, outcome). Before each action the ``k`` records
most similar to the current observation, among those older than the window (the window shows the
recent ones already), go into the prompt above the current step; the window and the constrained
action call are the ``window`` baseline's. Similarity is the ``embed`` endpoint's cosine
(one ``/v1/embeddings`` call per step, recorded as an ``embed`` turn with its tokens, so it counts
in the per-step cost) or BM25 over the words (no model). The step's ``memory_context`` records
what was retrieved with its scores and, for the embedding search, the observation's vector, so a
resumed episode rebuilds the index without calling the embedding endpoint again.
"""

from __future__ import annotations

import numpy as np

from automem_dagster.agent import prompts
from automem_dagster.agent.baselines import DEFAULT_WINDOW, WindowAgent
from automem_dagster.agent.memory_settings import RagSettings
from automem_dagster.agent.retrieval import Hit, Record, decode_vector, encode_vector, nearest_by_bm25, nearest_by_vector
from automem_dagster.agent.step_records import TurnRecord
from automem_dagster.llm.client import LLMClient

MEMORY_SHARE = 3
"""Retrieved records may take at most 1/3 of the request's characters: the lowest-ranked ones are
left out beyond that, so retrieval never pushes the current step out of the context."""


class RagAgent(WindowAgent):
    """The window agent with retrieved records of the episode's earlier steps in its prompt."""

    def __init__(self, family: str, actions: dict[str, str], parse_action, client: LLMClient,
                 window: int = DEFAULT_WINDOW, settings: RagSettings | None = None,
                 embed_client: LLMClient | None = None, episode_seed: int = 0):
        super().__init__(family, actions, parse_action, client, window, episode_seed)
        self.settings = settings or RagSettings()
        if self.settings.retriever == "embedding" and embed_client is None:
            raise ValueError("the rag baseline's embedding retriever needs an embed endpoint: "
                             "add an `embed:` entry to the endpoints file, or use the bm25 retriever")
        self.embed_client = embed_client
        self.records: list[Record] = []
        self._observation = ""
        self._vector: np.ndarray | None = None
        self._hits: list[Hit] = []
        self._left_out = 0

    def _candidates(self) -> list[Record]:
        """Records older than the window: the window already shows the last ``window`` steps."""
        return self.records[:len(self.records) - self.window] if self.window else list(self.records)

    async def prepare(self, step: int, observation: str) -> list[TurnRecord]:
        self._observation, turns = observation, []
        if self.settings.retriever == "embedding":
            emb = await self.embed_client.embed([observation])
            self._vector = np.asarray(emb.vectors[0], dtype="<f4")
            turns.append(TurnRecord("embed", "embed", "", input_tokens=emb.input_tokens, latency_s=emb.latency_s,
                                    attempts=emb.attempts, retries=emb.retries, retry_s=emb.retry_s))
            self._hits = nearest_by_vector(self._candidates(), self._vector, self.settings.k)
        else:
            self._hits = nearest_by_bm25(self._candidates(), observation, self.settings.k)
        self._fit_hits()
        return turns

    def _fit_hits(self) -> None:
        texts = [h.record.text(self.settings.record) for h in self._hits]
        self._left_out = 0
        while texts and sum(map(len, texts)) > self.char_budget() // MEMORY_SHARE:
            texts.pop()
            self._hits.pop()
            self._left_out += 1

    def memory_text(self) -> str:
        if not self._hits:
            return ""
        return prompts.RAG_HEADER + "\n" + "\n\n".join(h.record.text(self.settings.record) for h in self._hits)

    def memory_context(self) -> dict:
        context = {"retriever": self.settings.retriever, "candidates": len(self._candidates()),
                   "retrieved": [{"step": h.record.step, "score": round(h.score, 6),
                                  "text": h.record.text(self.settings.record)} for h in self._hits]}
        if self._left_out:
            context["left_out"] = self._left_out
        if self._vector is not None:
            context["key_vector"] = encode_vector(self._vector)
        return context

    def recall(self, step: int, observation: str, record: dict) -> None:
        super().recall(step, observation, record)
        self._observation = observation
        vector = record.get("memory_context", {}).get("key_vector")
        if vector is None and self.settings.retriever == "embedding":
            raise ValueError("the step records no key_vector, which the embedding retriever's index needs")
        self._vector = decode_vector(vector) if vector is not None else None

    def record_outcome(self, action: str, reward: float) -> None:
        self.records.append(Record(len(self.records), self._observation, action, reward, self._vector))
        super().record_outcome(action, reward)
