"""The memory baselines' parts without a server: vector and BM25 search (``agent/retrieval.py``), the
``rag`` agent's refusal without an embedding endpoint, and the ``summary`` agent's bounded summary."""

import numpy as np
import pytest
from crafter_actions import CRAFTER

from automem_dagster.agent.memory_settings import RagSettings, settings_for
from automem_dagster.agent.rag_agent import RagAgent
from automem_dagster.agent.retrieval import Record, decode_vector, encode_vector, nearest_by_bm25, nearest_by_vector
from automem_dagster.games.actions import ActionVocabulary
from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.client import LLMClient


def test_vector_search_returns_the_records_nearest_the_query():
    """Unit vectors at known angles from the query: the search returns them nearest first, whatever
    their length (cosine), with ties to the earlier step."""
    angles = {0: 80, 1: 10, 2: 45, 3: 30, 4: 10, 5: 170}                  # degrees from the query
    records = [Record(s, f"obs {s}", "do", 0.0, np.array([np.cos(np.radians(a)), np.sin(np.radians(a)), 0.0])
                      * (s + 1)) for s, a in angles.items()]
    hits = nearest_by_vector(records, np.array([2.0, 0.0, 0.0]), 4)
    assert [h.record.step for h in hits] == [1, 4, 3, 2]
    assert [round(h.score, 4) for h in hits] == [round(np.cos(np.radians(a)), 4) for a in (10, 10, 30, 45)]
    assert nearest_by_vector(records, np.array([1.0, 0, 0]), 10)[-1].record.step == 5   # k past the records: all
    assert nearest_by_vector([], np.array([1.0]), 3) == []
    vector = np.array([0.1, -2.5, 3.0e-7], dtype="<f4")
    assert np.array_equal(decode_vector(encode_vector(vector)), vector)       # exact through the trajectory


def test_bm25_returns_the_records_sharing_the_query_terms():
    observations = ["you see grass and a tree to the north", "water to the east, sand nearby",
                    "a zombie to the west, grass around", "a tree and a table near the water",
                    "stone and coal to the south"]
    records = [Record(s, o, "noop", 0.0) for s, o in enumerate(observations)]
    hits = nearest_by_bm25(records, "tree north", 3)
    assert [h.record.step for h in hits[:2]] == [0, 3]                       # both terms, then "tree" alone
    assert hits[0].score > hits[1].score > 0 and hits[2].score == 0
    assert [h.record.step for h in nearest_by_bm25(records, "coal", 1)] == [4]
    assert [h.score for h in nearest_by_bm25(records, "diamond", 2)] == [0.0, 0.0]  # no shared term: scores 0


def test_rag_refuses_an_embedding_search_without_an_embed_endpoint(tmp_path):
    client = LLMClient(EndpointConfig(name="game", base_url="http://127.0.0.1:9/v1"), "http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="add an `embed:` entry"):
        RagAgent("crafter", CRAFTER, ActionVocabulary(CRAFTER, "noop").parse, client, settings=RagSettings())
    with pytest.raises(ValueError, match="rag k 0"):
        settings_for("rag", {"k": 0})
    with pytest.raises(ValueError, match=r"expected some of \['every', 'summary_tokens'\]"):
        settings_for("summary", {"n": 3})


def test_a_summary_under_json_schema_is_bounded_and_read_back_as_text():
    from automem_dagster.agent.turn_format import json_turn_text, summary_turn

    schema = summary_turn(60).schema
    assert schema["properties"]["summary"]["pattern"].endswith("{1,60}$") and schema["required"] == ["summary"]
    assert json_turn_text('{"summary": "tree north, water east"}') == "tree north, water east"
