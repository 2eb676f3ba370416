"""A sharded rollout_batch under Dagster's multiprocess executor: shards in their own processes,
a failed shard retried on its own, and the merged batch equal to one process playing every seed.

The job is rebuilt in each step process (``dg.build_reconstructable_job``); where the project's files and the
scripted endpoint are comes through environment variables, which the step processes inherit.
"""

import asyncio
import os
import shutil
from collections import Counter

import dagster as dg
import pytest
import yaml
from batch_content import batch_content

from automem_dagster.defs.common.resources import LLMEndpointsResource, MlflowResource, StorageResource
from automem_dagster.defs.structure.assets import rollout_batch
from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.llm.session import connect
from automem_dagster.loop.settings import RoundSettings
from automem_dagster.loop.structure import rollout_stage, start_round

RULES = [
    {"match": "Phase: LOG", "reply": "<|DONE|>"},
    {"match": "Step 2. Your previous action", "reply": "<|ACTION|>do<|END|>"},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>move_left<|END|>"},
]
FAIL_ONCE = {"match": "Step 3. Your previous action", "status": 500, "times": 1}
"""One request of one episode fails: exactly one shard fails, and its retry must finish it."""
EPISODES, STEPS = 4, 5
ENV = "AUTOMEM_TEST_SHARDED"


def sharded_rollout_job():
    """The rollout asset alone, under the multiprocess executor, on the files named in $AUTOMEM_TEST_SHARDED."""
    paths = yaml.safe_load(os.environ[ENV])
    resources = {"endpoints": LLMEndpointsResource(endpoints_file=paths["endpoints"]),
                 "storage": StorageResource(runs=paths["runs"], scaffolds=paths["scaffolds"], lineage=paths["lineage"],
                                            specialists=paths["specialists"]),
                 "mlflow": MlflowResource(tracking_uri=paths["mlflow"])}
    job = dg.define_asset_job("sharded_rollout", selection=[rollout_batch],
                              executor_def=dg.multiprocess_executor.configured({"max_concurrent": 2}))
    return dg.Definitions(assets=[rollout_batch], jobs=[job], resources=resources).resolve_job_def("sharded_rollout")


def _endpoints(tmp_path, server):
    path = tmp_path / "endpoints.yaml"
    path.write_text(yaml.safe_dump({"game": {"name": "game", "base_url": server.base_url, "model": "scripted",
                                             "constrained": "none", "max_retries": 0}}))
    return path


@pytest.mark.integration
def test_shards_in_their_own_processes_merge_into_the_one_process_batch(tmp_path, storage, scripted, monkeypatch):
    clean_storage = StorageResource(runs=str(tmp_path / "clean-runs"), scaffolds=str(tmp_path / "clean-scaffolds"),
                                    lineage=str(tmp_path / "clean-lineage"), specialists=str(tmp_path / "clean-specialists"))
    shutil.copytree(storage.scaffolds, clean_storage.scaffolds)
    server = scripted([FAIL_ONCE, *RULES])
    monkeypatch.setenv(ENV, yaml.safe_dump({
        "endpoints": str(_endpoints(tmp_path, server)), "runs": storage.runs,
        "scaffolds": storage.scaffolds, "lineage": storage.lineage, "specialists": storage.specialists,
        "mlflow": f"sqlite:///{tmp_path}/mlflow.db"}))
    run_config = {"ops": {"rollout_batch": {"config": {"rollout_episodes": EPISODES, "rollout_max_steps": STEPS,
                                                       "concurrency": 2, "shards": 2}}}}
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        # Step processes import this module by name from tests/, as pytest did.
        job = dg.build_reconstructable_job(__name__, "sharded_rollout_job",
                                           reconstructor_working_directory=os.path.dirname(__file__))
        with dg.execute_job(job, instance=instance, run_config=run_config,
                            tags={"dagster/partition": "crafter"}) as result:
            assert result.success
            retries = Counter(e.step_key for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY")
            succeeded = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
            pids = {e.pid for e in result.all_events if e.step_key and "rollout_batch_shard" in e.step_key}
            [materialization] = result.asset_materializations_for_node("rollout_batch")
            batch = materialization.metadata["batch"].value
    shards = sorted(key for key in succeeded if "rollout_batch_shard" in key)
    assert len(shards) == 2 and sorted(retries[key] for key in shards) == [0, 1], retries  # only the failed one reran
    assert len(pids) >= 2                          # each shard step ran in a process of its own

    settings = RoundSettings("crafter", EPISODES, STEPS, STEPS, 2, 2, 3)
    store = clean_storage.storage()
    seeds = start_round(settings, store).seeds
    # The same server (its one failure is spent), so the trajectories' endpoint records agree too.
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url=server.base_url, model="scripted",
                                                 constrained="none", max_retries=0))

    async def one_process():
        async with connect(config, tmp_path / "logs") as clients:
            return await rollout_stage(settings, start_round(settings, store).champion, seeds, clients, store)

    whole = asyncio.run(one_process())
    assert batch_content(batch) == batch_content(whole.out_dir)
