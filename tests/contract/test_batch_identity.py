"""A batch stands for what played it (``rollout/identity.py``): two scripted OpenAI-compatible
servers, ``model-a`` always moving east and ``model-b`` always moving west, on real Crafter
episodes (2 episodes x 4 steps), through the CLI and the loops' own stages."""

import asyncio
import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml
from builders import with_routine

from automem_dagster import cli
from automem_dagster.agent.sampling import request_seed
from automem_dagster.commands import shared
from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.llm.server_info import endpoint_identity
from automem_dagster.llm.session import connect
from automem_dagster.llm.vllm_lora import content_hash as adapter_hash
from automem_dagster.llm.vllm_lora import serve_adapter
from automem_dagster.loop.challenger import judge_challenger
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.evaluation import evaluation_spec
from automem_dagster.loop.gate import paired_verdict
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import Storage
from automem_dagster.loop.structure import load_verdict
from automem_dagster.options import Budget
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.rollout import run_batch
from automem_dagster.rollout.batch_spec import BatchConflict
from automem_dagster.rollout.identity import IDENTITY_VERSION
from automem_dagster.rollout.shards import run_shard
from automem_dagster.rollout.summary import summarize_batch
from automem_dagster.rollout.trajectory import finished_episodes, read_manifest, read_trajectory
from automem_dagster.scaffold import content_hash, load_scaffold, save_scaffold
from automem_dagster.tracking import Tracker

SETTINGS = StructureConfig(budget=Budget(eval_max_steps=4, eval_episodes=2, concurrency=2)).for_game("crafter")


def rules(direction: str) -> list[dict]:
    return [{"match": "Phase: LOG", "reply": "<|DONE|>"}, {"match": "", "reply": f"<|ACTION|>move_{direction}<|END|>"}]


@pytest.fixture
def storage(tmp_path):
    scaffolds = tmp_path / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    return Storage(runs=tmp_path / "runs", scaffolds=scaffolds, lineage=tmp_path / "lineage")


@pytest.fixture
def servers(scripted):
    """``{"model-a": server moving east, "model-b": server moving west}``, each serving only its model."""
    return {"model-a": scripted(rules("east"), {"models": ["model-a"]}),
            "model-b": scripted(rules("west"), {"models": ["model-b"]})}


def endpoint(server, model: str, **settings) -> dict:
    return {"name": "game", "base_url": server.base_url, "model": model, "constrained": "none", **settings}


def config(server, model: str, **settings) -> EndpointsConfig:
    return EndpointsConfig(game=EndpointConfig(**endpoint(server, model, **settings)))


def play(cfg: EndpointsConfig, storage: Storage, scaffold=None, settings: StructureConfig = SETTINGS):
    """The round's evaluation batch of ``scaffold`` (default the champion v0) played with ``cfg``."""
    async def go():
        async with connect(cfg, storage.runs / "logs") as clients:
            return await run_batch(evaluation_spec(settings, scaffold or load_scaffold("crafter", 0), storage), clients)
    return asyncio.run(go())


def actions(batch) -> set[str]:
    return {s["action"] for path in finished_episodes(batch.out_dir) for s in read_trajectory(path)[1]}


def requests(server) -> list[dict]:
    if not server.request_log.exists():
        return []
    return [json.loads(line)["body"] for line in server.request_log.read_text().splitlines()]


def test_a_second_endpoints_file_plays_its_own_model_and_both_runs_say_which(storage, servers, tmp_path,
                                                                              monkeypatch, caplog, capsys):
    monkeypatch.setattr(shared, "STORAGE", storage)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("COLUMNS", "200")   # the compare table unwrapped
    for model, server in servers.items():
        path = tmp_path / f"{model}.yaml"
        path.write_text(yaml.safe_dump({"game": endpoint(server, model)}))
        with caplog.at_level(logging.WARNING, logger="automem_dagster.rollout.batch_spec"):
            assert cli.main(["evaluate", "--game", "crafter", "--scaffold", "v0", "--eval-episodes", "2",
                             "--eval-max-steps", "4", "--endpoints", str(path)]) == 0
    assert {r["model"] for r in requests(servers["model-b"])} == {"model-b"}    # the second evaluation asked model-b
    first, second = sorted((storage.runs / "evaluations" / "crafter" / "v0").iterdir(), key=lambda p: len(p.name))
    assert second.name.startswith(first.name + "-")          # played beside the first batch, named by its digest
    assert actions(summarize_batch(first)) == {"move_east"} and actions(summarize_batch(second)) == {"move_west"}
    identities = [read_manifest(b)["identity"] for b in (first, second)]
    assert second.name.endswith(identities[1]["digest"])
    assert [i["roles"]["game"]["model_card"] for i in identities] == [{"listed": True, "root": None, "parent": None,
                                                                       "owned_by": None}] * 2
    assert "roles.game.model" in caplog.text and str(second) in caplog.text     # the log says what changed
    rows = Tracker().runs_for("crafter")
    assert {(r["models"], r["identity"]) for r in rows} == {("game=model-b", identities[1]["digest"]),
                                                             ("game=model-a", identities[0]["digest"])}
    capsys.readouterr()
    assert cli.main(["compare", "--game", "crafter", "--eval-episodes", "2", "--eval-max-steps", "4",
                     "--out", str(tmp_path / "agents.png")]) == 0
    table = capsys.readouterr().out
    assert "game=model-a" in table and "game=model-b" in table and identities[0]["digest"] in table


def candidate_of(storage: Storage):
    """A pending candidate v1 of the champion v0 (another plan prompt), recorded in the lineage."""
    champion = load_scaffold("crafter", 0, storage.scaffolds)
    candidate = champion.model_copy(update={"version": 1, "parent": 0, "plan_prompt": champion.plan_prompt + " Go."})
    save_scaffold(candidate, storage.scaffolds)
    with storage.update_lineage("crafter") as lineage:
        lineage.record_candidate(1, 0, content_hash(candidate), None)
    return candidate


def test_a_structure_round_refuses_to_pair_batches_of_two_models(storage, servers):
    candidate = candidate_of(storage)
    champion_batch = play(config(servers["model-a"], "model-a"), storage)
    by_b = play(config(servers["model-b"], "model-b"), storage, candidate)
    with pytest.raises(RoundError, match=r"different roles\.game\.model.*nothing is decided"):
        judge_challenger("candidate", "crafter", 1, (by_b, champion_batch), storage)
    lineage = storage.load_lineage("crafter")
    assert lineage.champion().version == 0 and lineage.record(1).decision is None
    assert load_verdict(storage, "crafter", 1) is None
    # The same candidate played by the champion's model differs in the scaffold alone: it is decided.
    shutil.rmtree(by_b.out_dir)
    by_a = play(config(servers["model-a"], "model-a"), storage, candidate)
    record = judge_challenger("candidate", "crafter", 1, (by_a, champion_batch), storage)
    assert record.identity["candidate"]["models"] == record.identity["champion"]["models"] == {"game": "model-a"}
    assert record.identity["candidate"]["scaffold_hash"] != record.identity["champion"]["scaffold_hash"]


def test_changing_only_the_temperature_plays_a_new_champion_batch(storage, servers, caplog):
    server = servers["model-a"]
    first = play(config(server, "model-a"), storage)
    again = play(config(server, "model-a"), storage)
    assert again.out_dir == first.out_dir                     # the same identity: reused, nothing played
    sent = len(requests(server))
    with caplog.at_level(logging.WARNING, logger="automem_dagster.rollout.batch_spec"):
        warmer = play(config(server, "model-a", temperature=0.7), storage)
    assert warmer.out_dir != first.out_dir and len(warmer.episodes) == 2
    assert {r.get("temperature") for r in requests(server)[sent:]} == {0.7}
    assert "roles.game.sampling.temperature" in caplog.text
    with pytest.raises(RoundError, match=r"roles\.game\.sampling\.temperature"):
        paired_verdict(warmer, first, "candidate")


def test_batches_from_before_identities_load_but_are_not_reused_or_paired(storage, servers):
    old = play(config(servers["model-a"], "model-a"), storage)
    manifest = read_manifest(old.out_dir)
    del manifest["identity"]
    (Path(old.out_dir) / "batch.json").write_text(json.dumps(manifest))
    assert len(summarize_batch(old.out_dir).episodes) == 2               # still readable
    new = play(config(servers["model-a"], "model-a"), storage)
    assert new.out_dir != old.out_dir and new.out_dir.endswith(read_manifest(new.out_dir)["identity"]["digest"])
    with pytest.raises(RoundError, match="records no identity"):
        paired_verdict(new, summarize_batch(old.out_dir), "candidate")


def test_every_request_carries_the_seed_of_its_place_in_the_episode(storage, servers, tmp_path):
    server = servers["model-a"]
    spec = evaluation_spec(StructureConfig(budget=Budget(eval_max_steps=3, eval_episodes=1, concurrency=1)).for_game("crafter"),
                           with_routine("crafter", log_every=1), storage)   # LOG turns too, in 3 steps

    async def go():
        async with connect(config(server, "model-a", temperature=0.9), tmp_path / "logs") as clients:
            return await run_batch(spec, clients)

    batch = asyncio.run(go())
    [episode] = batch.episodes
    expected = []
    for step in read_trajectory(finished_episodes(batch.out_dir)[0])[1]:
        seen: dict[str, int] = {}
        for turn in step["turns"]:
            expected.append(request_seed(episode.seed, step["step"], turn["phase"], seen.get(turn["phase"], 0)))
            seen[turn["phase"]] = seen.get(turn["phase"], 0) + 1
    sent = [r["seed"] for r in requests(server)]
    assert len(expected) >= 5 and len(set(expected)) == len(expected)
    assert sent == expected


def test_a_vllm_endpoint_records_the_version_model_card_and_adapter_its_server_reports(tmp_path, vllm_server):
    server = vllm_server(rules("east"), base_model="Qwen/Qwen3-0.6B", version="0.11.2")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "base_model_name_or_path": "Qwen/Qwen3-0.6B"}))
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    base = EndpointConfig(name="game", base_url=server.base_url, model="Qwen/Qwen3-0.6B", server="vllm")
    served = serve_adapter(base, "automem-crafter-a1", adapter)
    facts = endpoint_identity(base, server.base_url)
    memory = endpoint_identity(base.model_copy(update={"model": served.name}), server.base_url)
    assert facts["server"] == {"kind": "vllm", "version": "0.11.2"}
    assert facts["model_card"] == {"listed": True, "root": "Qwen/Qwen3-0.6B", "parent": None, "owned_by": "vllm"}
    assert facts["adapter"] is None and facts["output_cap"] == {"field": "max_tokens", "value": 160}
    assert memory["model_card"]["parent"] == "Qwen/Qwen3-0.6B"
    assert memory["adapter"] == {"name": "automem-crafter-a1", "sha256": adapter_hash(adapter), "base": "Qwen/Qwen3-0.6B"}


def test_a_shard_refuses_a_merged_batch_that_another_model_played(storage, servers):
    played = play(config(servers["model-a"], "model-a"), storage)

    async def shard():
        async with connect(config(servers["model-b"], "model-b"), storage.runs / "logs") as clients:
            return await run_shard(evaluation_spec(SETTINGS, load_scaffold("crafter", 0), storage), 0, [42], clients)

    with pytest.raises(BatchConflict, match=r"different roles\.game\.model"):
        asyncio.run(shard())
    assert requests(servers["model-b"]) == [] and len(summarize_batch(played.out_dir).episodes) == 2


def test_a_batch_played_under_another_memory_routine_is_another_scaffold(storage, servers, caplog):
    """The routine (when LOG runs, when a consultation is reused) is scaffold data: a batch played under
    another routine has another scaffold hash, so it is played again beside the first, and a round
    pairs the two only as a candidate round, where the scaffold is what is tested."""
    server = servers["model-a"]
    first = play(config(server, "model-a"), storage)
    recorded = read_manifest(first.out_dir)["identity"]
    assert "step_policy" not in recorded and recorded["identity_version"] == IDENTITY_VERSION
    sparser = with_routine("crafter", log_every=load_scaffold("crafter", 0).routine.log_every + 1)
    assert content_hash(sparser) != recorded["scaffold_hash"]
    with caplog.at_level(logging.WARNING, logger="automem_dagster.rollout.batch_spec"):
        other = play(config(server, "model-a"), storage, sparser)
    assert other.out_dir != first.out_dir and "scaffold_hash" in caplog.text
    assert paired_verdict(other, first, "candidate").comparison.n == 2
    with pytest.raises(RoundError, match=r"different scaffold_hash"):
        paired_verdict(other, first, "specialist")


def test_a_server_that_may_batch_requests_records_the_concurrency_its_batch_was_played_at(storage, servers):
    """Issue 54: an OpenAI-compatible server may batch concurrent requests together, so what a replay
    repeats can depend on how many episodes ran at once. Its role says so (``replay``), the identity
    records the concurrency, and a batch played at another concurrency is another batch, never paired
    as one; a vLLM declared batch-invariant, like the embedded server, is the same at any concurrency."""
    server = servers["model-a"]
    first = play(config(server, "model-a"), storage)
    assert first.identity["roles"]["game"]["replay"]["any_concurrency"] is False
    assert first.identity["concurrency"] == SETTINGS.budget.concurrency
    one_at_a_time = StructureConfig(budget=Budget(eval_max_steps=4, eval_episodes=2, concurrency=1)).for_game("crafter")
    alone = play(config(server, "model-a"), storage, settings=one_at_a_time)
    assert alone.out_dir != first.out_dir and alone.identity["concurrency"] == 1
    with pytest.raises(RoundError, match=r"different concurrency"):
        paired_verdict(alone, first, "candidate")
    invariant = EndpointConfig(name="game", base_url=server.base_url, server="vllm", constrained="none",
                               batch_invariant=True)
    assert endpoint_identity(invariant, server.base_url)["replay"]["any_concurrency"] is True


def test_a_batch_recorded_before_the_routine_was_scaffold_data_is_not_reused(storage, servers, caplog):
    """A batch.json of identity version 1 recorded the routine apart (``step_policy``): it is played
    again beside it with those fields named, never continued or paired as one of today's."""
    server = servers["model-a"]
    first = play(config(server, "model-a"), storage)
    manifest = json.loads((Path(first.out_dir) / "batch.json").read_text())
    manifest["identity"] |= {"identity_version": 1,
                             "step_policy": {"revision": 2, "log_every": 5, "reuse_consultation": True}}
    (Path(first.out_dir) / "batch.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="automem_dagster.rollout.batch_spec"):
        again = play(config(server, "model-a"), storage)
    assert again.out_dir != first.out_dir and "identity_version, step_policy.log_every" in caplog.text
    with pytest.raises(RoundError, match=r"identity_version"):
        paired_verdict(again, summarize_batch(first.out_dir), "candidate")
