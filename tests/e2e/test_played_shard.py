"""A shard step whose seeds an embedded model already played into the merged batch starts no model
server: the batch's recorded identity is checked without one (``rollout.shards.played_without_server``).
Changed endpoint settings still go to the server, which refuses the batch."""

from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest
import yaml

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.execution.shards import Arm, shard_op, shard_outputs
from automem_dagster.defs.plans.values import Shard
from automem_dagster.defs.resources import LLMEndpointsResource
from automem_dagster.llm.config import load_endpoints
from automem_dagster.llm.process import ServerProcess
from automem_dagster.paths import DEFAULT_ENDPOINTS
from automem_dagster.rollout import RolloutSpec
from automem_dagster.rollout.batch_spec import BatchConflict
from automem_dagster.rollout.shards import merge_shards, played_without_server
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold import load_scaffold

SEEDS, STEPS = [42, 43], 2


def shards(spec: RolloutSpec) -> list[Shard]:
    """The plan's shards of ``spec``'s batch, one seed each, as the shard step receives them."""
    return [out.value for out in shard_outputs([Arm("rollout", spec)], RoundConfig(shards=len(SEEDS)))]


def play(shard: Shard, endpoints_file: Path, storage) -> Shard:
    step = shard_op("rollout_batch_shard")
    resources = {"endpoints": LLMEndpointsResource(endpoints_file=str(endpoints_file)), "storage": storage}
    with dg.build_op_context(resources=resources) as context:  # the run-scoped endpoints resource is torn down on exit
        return step(context, shard=shard)


def refuse_servers(monkeypatch) -> None:
    def refuse(server, *args, **kwargs):
        raise AssertionError(f"a server was started: {server.label}")

    monkeypatch.setattr(ServerProcess, "start", refuse)


@pytest.mark.server
def test_a_played_embedded_shard_starts_no_server_and_changed_settings_still_ask_it(storage, tmp_path, monkeypatch):
    store = storage.storage()
    spec = RolloutSpec("crafter", load_scaffold("crafter", 0, store.scaffolds), SEEDS, STEPS, store.runs / "batch", 1)
    planned = shards(spec)
    played = [play(shard, DEFAULT_ENDPOINTS, storage) for shard in planned]
    merge_shards(spec, [list(s.seeds) for s in planned])
    recorded = read_manifest(spec.out_dir)["identity"]["roles"]["game"]
    assert recorded["server"]["package"] and recorded["server"]["model_file"].endswith(".gguf")

    with monkeypatch.context() as m:
        refuse_servers(m)
        again = [play(shard, DEFAULT_ENDPOINTS, storage) for shard in planned]
    assert [s.endpoints["game"]["model"] for s in again] == [s.endpoints["game"]["model"] for s in played]
    assert replace(again[0], endpoints={}) == planned[0]

    warmer = yaml.safe_load(DEFAULT_ENDPOINTS.read_text())
    warmer["game"]["temperature"] = 0.9
    changed = tmp_path / "warmer.yaml"
    changed.write_text(yaml.safe_dump(warmer))
    roles = {"game": load_endpoints(changed).game}
    assert not played_without_server(spec, [42], roles, [])
    with pytest.raises(BatchConflict, match=r"roles\.game\.sampling\.temperature"):
        play(planned[0], changed, storage)
