"""How the proficiency round's shards connect: the new adapter's arm as the two-model agent with it, every
other arm as the agent in service. The demo found the champion's arm under the rule actor played on the
server that loaded the pending adapter, with the adapter selected (``serving.one_model`` keeps the rule
actor's memory client); only the batch identity check stopped it from scoring the specialist as the champion."""

from pathlib import Path

from automem_dagster.defs.execution.shards import Connection
from automem_dagster.defs.plans.values import Shard
from automem_dagster.defs.proficiency.assets import service_connection, specialist_connection
from automem_dagster.defs.resources import LLMEndpointsResource
from automem_dagster.paths import ASSETS
from automem_dagster.training.registry import AdapterRecord, SpecialistRegistry

RULE_ACTOR = LLMEndpointsResource(endpoints_file=str(ASSETS / "endpoints" / "embedded-rule-actor.yaml"), meta="rules")


def shard(arm: str, champion_adapter: str | None) -> Shard:
    return Shard(arm, 0, (), {"family": "keydoor"}, adapter="a2", champion_adapter=champion_adapter)


def registered(storage, *ids: str) -> None:
    reg = SpecialistRegistry.load("keydoor", storage.storage().specialists)
    for adapter_id in ids:
        reg.add(AdapterRecord(adapter_id, 0, "hash", "data", f"/adapters/{adapter_id}", f"/adapters/{adapter_id}.gguf",
                              "given"))
    reg.save()


def test_champion_arms_without_a_specialist_in_service_connect_as_the_endpoints_file(storage):
    registered(storage, "a2")
    store = storage.storage()
    for arm in ("champion", "champion_replay", "training"):
        assert specialist_connection(shard(arm, None), RULE_ACTOR, store) == Connection()
        assert service_connection(shard(arm, None), RULE_ACTOR, store) == Connection()


def test_each_arm_loads_only_its_own_adapter(storage):
    registered(storage, "a1", "a2")
    store = storage.storage()
    new = specialist_connection(shard("specialist", "a1"), RULE_ACTOR, store)
    served = specialist_connection(shard("champion", "a1"), RULE_ACTOR, store)
    assert new.two_model and new.lora == [Path("/adapters/a2.gguf")]
    assert served.two_model and served.lora == [Path("/adapters/a1.gguf")]
    assert new.config.memory.lora_id == served.config.memory.lora_id == 0
