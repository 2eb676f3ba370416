"""The specialist on a vLLM server: runtime LoRA loading, verified, and memory turns sent with it.

No vLLM runs here, so the server is ``standins/scripted_vllm.py``, a stand-in written from vLLM's
source: ``vllm/entrypoints/serve/lora/api_router.py`` (the load/unload routes exist
only under ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, else FastAPI's 404
``{"detail":"Not Found"}``; a load answers 200 with ``Success: LoRA adapter '<name>' added
successfully.``) and ``vllm/entrypoints/openai/models/serving.py`` (errors as
``{"error": {"message", "type", "param", "code"}}``: 400 InvalidUserInput for missing fields or a
name already loaded, 404 NotFoundError for a missing path or an unknown adapter, 400 BadRequestError for an
engine failure such as ``LoRA rank 64 is greater than max_lora_rank 16.``; ``/v1/models`` lists
adapters with ``root`` = path and ``parent`` = the base model; a chat request naming an unknown
model answers 404 ``The model `x` does not exist.``). It records the model each chat request
named, which is how these tests see which adapter played.

The adapter folders are peft folders as the trainer writes them, minus real weights: vLLM's
routes read the config's rank and the path; the content hash covers the weight bytes.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest
from builders import scripted_client
from lora_inputs import SETTINGS, STATS

from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.config import EndpointConfig, EndpointsConfig
from automem_dagster.llm.session import Clients
from automem_dagster.llm.vllm_lora import adapter_name, list_models, serve_adapter, unload_adapter
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.proficiency import specialist_evaluation_specs
from automem_dagster.loop.serving import check_specialist_served, one_model, serving_rank_limit, specialist_endpoints
from automem_dagster.loop.settings import ProficiencyBudget, ProficiencyConfig
from automem_dagster.loop.storage import Storage
from automem_dagster.rollout import run_batch
from automem_dagster.scaffold import load_scaffold
from automem_dagster.training.registry import AdapterRecord

BASE = "Qwen/Qwen2.5-0.5B-Instruct"
RULES = [{"match": "Phase: PLAN. Answer with the action.", "reply": "<|ACTION|>do<|END|>"},
         {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"},
         {"match": "", "reply": "<|DONE|>"}]


@pytest.fixture
def vllm(vllm_server):
    """Factory: ``vllm(**options)`` starts the stand-in serving ``BASE`` with ``RULES``."""
    return lambda **options: vllm_server(RULES, base_model=BASE, **options)


def peft_folder(path, rank: int, weights: bytes):
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
                                                          "base_model_name_or_path": BASE,
                                                          "target_modules": ["q_proj", "v_proj"]}))
    (path / "adapter_model.safetensors").write_bytes(weights)
    return path


def record(tmp_path, adapter_id: str, rank: int = 8, weights: bytes = b"weights") -> AdapterRecord:
    folder = peft_folder(tmp_path / "runs" / "adapters" / "crafter" / adapter_id / "adapter", rank, weights)
    return AdapterRecord(adapter_id, 0, "hash", "data", str(folder), None, "meta-LLM")


def endpoints(server) -> EndpointsConfig:
    game = EndpointConfig(name="game", base_url=server.base_url, model=BASE, server="vllm", constrained="vllm")
    return EndpointsConfig(game=game, memory=game.model_copy(update={"name": "memory"}))


def chat_models(server) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/scripted/requests") as resp:
        return [r["model"] for r in json.loads(resp.read())["requests"]]


def evaluate(config: EndpointsConfig, rec: AdapterRecord, tmp_path):
    """The proficiency loop's evaluation, as its shard steps play it: the served adapter checked
    (``check_specialist_served``), then 1 Crafter episode of 2 steps for each agent."""
    settings = ProficiencyConfig(budget=ProficiencyBudget(eval_episodes=1, eval_max_steps=2, concurrency=1)).for_game("crafter")
    storage = Storage(runs=tmp_path / "runs", specialists=tmp_path / "specialists")

    async def run():
        game = LLMClient(config.game, config.game.base_url)
        memory = LLMClient(config.memory, config.memory.base_url)
        try:
            check_specialist_served(memory, settings.family, rec)
            specialist, champion = specialist_evaluation_specs(settings, load_scaffold("crafter", 0), rec, storage)
            clients = Clients(game, memory, None)
            return await run_batch(specialist, clients), await run_batch(champion, one_model(clients))
        finally:
            await game.close()
            await memory.close()

    return asyncio.run(run())


def test_the_adapter_is_loaded_listed_and_named_in_every_memory_turn(vllm, tmp_path):
    server = vllm()
    a1 = record(tmp_path, "a1")
    config, lora = specialist_endpoints(endpoints(server), a1, "crafter")
    name = config.memory.model
    assert lora == [] and name == adapter_name("crafter", "a1", a1.adapter_dir) and name.startswith("automem-crafter-a1-")
    card = next(m for m in list_models(config.memory) if m["id"] == name)
    assert card["parent"] == BASE and card["root"] == a1.adapter_dir
    assert config.game.model == BASE

    specialist, champion = evaluate(config, a1, tmp_path)
    assert specialist.episodes and champion.episodes
    models = chat_models(server)
    assert set(models) == {BASE, name} and models.count(name) >= 2   # memory turns: the adapter; actions: the base

    # Loading again (a resumed round) finds the same content under the same name and keeps it.
    again, _ = specialist_endpoints(endpoints(server), a1, "crafter")
    assert again.memory.model == name and [m["id"] for m in list_models(config.memory)].count(name) == 1


def test_a_new_adapter_gets_a_new_name_and_the_old_one_cannot_be_scored_for_it(vllm, tmp_path):
    server = vllm()
    a1, a2 = record(tmp_path, "a1", weights=b"first"), record(tmp_path, "a2", weights=b"second")
    old, _ = specialist_endpoints(endpoints(server), a1, "crafter")
    new, _ = specialist_endpoints(endpoints(server), a2, "crafter")
    assert new.memory.model != old.memory.model and new.memory.model.startswith("automem-crafter-a2-")

    evaluate(new, a2, tmp_path)
    assert old.memory.model not in chat_models(server) and new.memory.model in chat_models(server)
    # An endpoint still naming a1's adapter cannot be evaluated as a2, nor a2 once the server dropped it.
    with pytest.raises(RoundError, match=r"not adapter a2"):
        evaluate(old, a2, tmp_path)
    assert unload_adapter(new.memory, new.memory.model) and not unload_adapter(new.memory, new.memory.model)
    with pytest.raises(RoundError, match=r"does not list adapter automem-crafter-a2-"):
        evaluate(new, a2, tmp_path)
    # Retrained content under the same id is a different adapter: a different name.
    rewritten = tmp_path / "runs" / "adapters" / "crafter" / "a2" / "adapter" / "adapter_model.safetensors"
    rewritten.write_bytes(b"retrained")
    assert adapter_name("crafter", "a2", a2.adapter_dir) != new.memory.model


def test_a_server_without_runtime_lora_loading_is_refused_with_the_fix(vllm, tmp_path):
    server = vllm(runtime_lora=False)
    with pytest.raises(RoundError, match=r"no runtime LoRA API .*VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
        specialist_endpoints(endpoints(server), record(tmp_path, "a1"), "crafter")
    assert chat_models(server) == []


def load_route(server, body: dict) -> tuple[int, dict | str]:
    """What the stand-in's ``POST /v1/load_lora_adapter`` answers ``body``: status and JSON (or text)."""
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/load_lora_adapter", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def test_an_adapter_above_the_servers_rank_limit_is_refused_with_the_fix(vllm, tmp_path):
    server = vllm(max_lora_rank=16)
    status, body = load_route(server, {"lora_name": "big", "lora_path": record(tmp_path, "a0", rank=64).adapter_dir})
    assert (status, body["error"]["type"], body["error"]["code"]) == (400, "BadRequestError", 400)  # vLLM's, not 500
    with pytest.raises(RoundError, match=r"rank 64 \(LoRA rank 64 is greater than max_lora_rank 16\.\).*"
                                         r"--max-lora-rank 64"):
        specialist_endpoints(endpoints(server), record(tmp_path, "a1", rank=64), "crafter")
    served = serve_adapter(endpoints(server).memory, "automem-crafter-a2-x", record(tmp_path, "a2", rank=16).adapter_dir)
    assert served.loaded_now and served.rank == 16


def test_an_adapter_folder_the_server_cannot_see_is_refused_with_the_fix(vllm, tmp_path):
    server = vllm(visible_root=tmp_path / "server-volume")          # a server in a container, say
    with pytest.raises(RoundError, match=r"cannot see adapter folder .*No adapter found for .*same path"):
        specialist_endpoints(endpoints(server), record(tmp_path, "a1"), "crafter")


def test_a_memory_endpoint_naming_another_base_or_an_unreachable_server_is_named(vllm, tmp_path):
    server = vllm()
    config = endpoints(server)
    wrong = config.model_copy(update={"memory": config.memory.model_copy(update={"model": "some-other-base"})})
    with pytest.raises(RoundError, match=r"does not list the base model 'some-other-base'.*--served-model-name"):
        specialist_endpoints(wrong, record(tmp_path, "a1"), "crafter")
    gone = config.memory.model_copy(update={"base_url": "http://127.0.0.1:9/v1"})
    with pytest.raises(RoundError, match=r"unreachable .*start the vLLM server"):
        specialist_endpoints(config.model_copy(update={"memory": gone}), record(tmp_path, "a2"), "crafter")


def test_a_vllm_game_endpoint_serves_the_specialist_when_no_memory_endpoint_is_given(vllm, tmp_path):
    server = vllm()
    config, _ = specialist_endpoints(EndpointsConfig(game=endpoints(server).game), record(tmp_path, "a1"), "crafter")
    assert config.two_model and config.memory.name == "memory" and config.memory.model.startswith("automem-crafter-a1-")


BASE_INFO = {"name": "SmolLM2-135M-Instruct", "hidden_size": 576, "layers": 30, "parameters": 134_000_000,
             "context": 8192}


def test_the_rank_limit_comes_from_the_endpoint_and_bounds_the_meta_recommendation(scripted, tmp_path):
    from automem_dagster.meta.lora_config import recommend_lora
    from automem_dagster.training.settings import default_settings

    served = EndpointConfig(name="memory", base_url="http://127.0.0.1:8000/v1", model=BASE, server="vllm",
                            max_lora_rank=16)
    assert serving_rank_limit(EndpointsConfig(game=served)) == 16
    hosted = served.model_copy(update={"server": "openai-compatible", "constrained": "json_schema"})
    assert serving_rank_limit(EndpointsConfig(game=hosted)) is None
    big = json.dumps({"reasoning": "400 examples bear a large rank here", "settings": {**SETTINGS, "rank": 64,
                                                                                        "alpha": 128}})
    fits = json.dumps({"reasoning": "within the server's limit of sixteen", "settings": {**SETTINGS, "rank": 16}})
    server = scripted([{"match": "That reply was rejected", "reply": fits}, {"match": "at most 16", "reply": big}])

    async def go():
        client = scripted_client(server)
        try:
            return await recommend_lora(STATS, BASE_INFO, default_settings(576), client, 3, max_rank=16)
        finally:
            await client.close()

    choice = asyncio.run(go())
    assert choice.settings.rank == 16 and "exceeds the serving vLLM's --max-lora-rank 16" in choice.attempts[0].error


def test_every_replica_of_the_memory_role_loads_the_adapter(vllm, tmp_path):
    first, second = vllm(), vllm()
    a1 = record(tmp_path, "a1")
    game = EndpointConfig(name="game", base_url=first.base_url, replicas=[second.base_url], model=BASE, server="vllm",
                          constrained="vllm")
    config, _ = specialist_endpoints(EndpointsConfig(game=game), a1, "crafter")
    name = config.memory.model
    for server in (first, second):
        listed = [m["id"] for m in list_models(config.memory.model_copy(update={"base_url": server.base_url,
                                                                                 "replicas": []}))]
        assert name in listed, server.base_url
