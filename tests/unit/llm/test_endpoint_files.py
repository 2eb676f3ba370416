"""The endpoints files shipped as examples load, and say what their comments promise."""

from automem_dagster.llm import load_endpoints
from automem_dagster.paths import DEFAULT_ENDPOINTS


def test_every_shipped_endpoints_file_loads_with_the_modes_its_provider_needs(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    folder = DEFAULT_ENDPOINTS.parent
    files = {p.stem: load_endpoints(p) for p in folder.glob("*.yaml")}
    assert {"embedded", "vllm", "openai", "anthropic"} <= set(files)
    vllm, openai, anthropic = files["vllm"], files["openai"], files["anthropic"]
    assert vllm.game.server == "vllm" and vllm.game.constrained == "vllm" and vllm.game.max_lora_rank
    assert vllm.memory is None  # the game's server serves the specialist
    assert openai.game.constrained == openai.meta.constrained == "json_schema"
    assert openai.meta.max_tokens_field == "max_completion_tokens" and "temperature" not in openai.meta.sampling()
    assert anthropic.meta.constrained == "json_schema" and set(anthropic.meta.sampling()) == {"temperature"}
