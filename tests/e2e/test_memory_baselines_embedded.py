"""The embedded server serves chat and ``/v1/embeddings`` from one process, as the ``rag`` baseline needs."""

import asyncio

import pytest

from automem_dagster.agent.retrieval import decode_vector
from automem_dagster.llm import EndpointConfig
from automem_dagster.rollout import RolloutSpec, read_trajectory, run_batch
from automem_dagster.scaffold import load_scaffold


@pytest.mark.integration
@pytest.mark.server
def test_the_embedded_server_serves_chat_and_embeddings_from_one_process(tmp_path):
    """Integration: with an embedded game role and no `embed:` entry, one llama.cpp process (started
    with --embeddings) answers the rag baseline's embedding and action calls, and the real model acts validly."""
    from automem_dagster.llm.config import EndpointsConfig
    from automem_dagster.llm.session import connect

    config = EndpointsConfig(game=EndpointConfig(name="game", base_url="embedded"), embedded_parallel=1)
    spec = RolloutSpec("crafter", load_scaffold("crafter", 0), [42], 3, tmp_path / "rag", concurrency=1, agent="rag",
                       window=1, settings={"k": 1})

    async def go():
        async with connect(config, tmp_path, embed=True) as clients:
            assert clients.embed.base_url == clients.game.base_url              # one server
            return await run_batch(spec, clients)

    summary = asyncio.run(go())
    _, steps, _ = read_trajectory(next((tmp_path / "rag" / "trajectories").glob("*.jsonl")))
    assert all(s["action_valid"] for s in steps) and summary.behaviour.model_calls_per_step == 2.0
    assert len(decode_vector(steps[0]["memory_context"]["key_vector"])) == 576   # SmolLM2-135M's hidden size
    assert steps[2]["memory_context"]["retrieved"][0]["step"] == 0
