"""Evaluations and training rollouts in seed shards: each batch an asset plays is split into shard
steps and merged back into what one process playing every seed leaves.

In-process (one process, each shard still its own step): that shards also run in processes of their
own, and that a failed one is retried alone, is tests/e2e/test_sharded_dagster.py's (the same shard op). Every
model is one scripted server whose replies depend only on the prompt, so two plays of one seed agree.
"""

import asyncio
import shutil
from pathlib import Path

import dagster as dg
from batch_content import batch_content
from builders import mlflow_resource, round_resources
from dagster_round_rules import GAME_RULES, RUN_CONFIG, meta_rules, winning_patch

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.plans.values import Evaluation
from automem_dagster.defs.proficiency.assets import training_rollouts
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from automem_dagster.defs.resources import StorageResource
from automem_dagster.defs.structure.assets import candidate_evaluation, diagnosis, rollout_batch, scaffold_candidate
from automem_dagster.llm.config import load_endpoints
from automem_dagster.llm.session import connect
from automem_dagster.loop.evaluation import evaluation_spec
from automem_dagster.loop.proficiency import start_proficiency_round, training_rollout_spec
from automem_dagster.loop.serving import one_model
from automem_dagster.rollout import run_batch
from automem_dagster.scaffold import load_scaffold


def _clean_copy(tmp_path, storage: StorageResource) -> StorageResource:
    """A second project with the same scaffolds (the round's candidate too) and nothing played."""
    clean = StorageResource(runs=str(tmp_path / "clean-runs"), scaffolds=str(tmp_path / "clean-scaffolds"),
                            lineage=str(tmp_path / "clean-lineage"), specialists=str(tmp_path / "clean-specialists"))
    shutil.copytree(storage.scaffolds, clean.scaffolds)
    return clean


def _one_process(resources: dict, tmp_path, stage):
    """``stage(clients)`` on the round's endpoints, in this process: a batch played whole, unsharded."""

    async def go():
        async with connect(load_endpoints(resources["endpoints"].endpoints_file), tmp_path / "logs") as clients:
            return await stage(clients)

    return asyncio.run(go())


def _shard_steps(result: dg.ExecuteInProcessResult, asset: str) -> list[str]:
    """The shard steps of ``asset``'s graph that succeeded, by mapping key (``candidate_0``)."""
    prefix = f"{asset}.{asset}_shard["
    return sorted(e.step_key.removeprefix(prefix).rstrip("]") for e in result.all_events
                  if e.event_type_value == "STEP_SUCCESS" and e.step_key.startswith(prefix))


def test_a_sharded_evaluation_merges_into_the_one_process_evaluation(tmp_path, storage, scripted):
    server = scripted(meta_rules(storage, [winning_patch()]) + GAME_RULES)
    resources = round_resources(tmp_path, storage, server, mlflow_resource(tmp_path))
    evaluation = RoundConfig(budget={"eval_episodes": 3, "eval_max_steps": 3}, shards=2)  # shards of 2 and 1 seeds per batch
    run_config = dg.RunConfig(ops={**RUN_CONFIG.ops, "candidate_evaluation": evaluation})
    result = dg.materialize([rollout_batch, diagnosis, scaffold_candidate, candidate_evaluation], partition_key="crafter",
                            resources=resources, run_config=run_config,
                            instance=dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster")))

    assert result.success
    # no A/A stored for the champion's identity: its batch and a replay beside the candidate, each sharded
    assert _shard_steps(result, "candidate_evaluation") == ["candidate_0", "candidate_1", "champion_0", "champion_1",
                                                            "champion_replay_0", "champion_replay_1"]
    value = result.output_for_node("candidate_evaluation")
    assert isinstance(value, Evaluation) and len(value.plan.seeds) == 3

    clean = _clean_copy(tmp_path, storage)
    store = clean.storage()
    candidate, champion = (load_scaffold("crafter", v, store.scaffolds) for v in (value.plan.challenger, value.plan.champion))
    specs = [evaluation_spec(evaluation.for_game("crafter"), scaffold, store) for scaffold in (candidate, champion)]
    whole = [_one_process(resources, tmp_path, lambda clients, spec=spec: run_batch(spec, clients)) for spec in specs]
    # the champion was replayed beside the candidate; bit-identical (scripted), so its first play is the batch
    assert Path(value.champion_batch + "-replay-v1", "batch.json").exists()
    assert [batch_content(batch) for batch in (value.challenger_batch, value.champion_batch)] == \
        [batch_content(batch.out_dir) for batch in whole]
    assert value.scores["per_seed"]["candidate"] != value.scores["per_seed"]["champion"]  # two different batches, each merged


def test_sharded_training_rollouts_merge_into_the_one_process_batch(tmp_path, storage, scripted):
    server = scripted(GAME_RULES)
    resources = round_resources(tmp_path, storage, server, mlflow_resource(tmp_path))
    config = ProficiencyConfig(budget={"rollout_episodes": 3, "rollout_max_steps": 3}, shard_size=2)  # shards of 2 and 1 seeds
    result = dg.materialize([training_rollouts], partition_key="crafter", resources=resources,
                            run_config=dg.RunConfig(ops={"training_rollouts": config}),
                            instance=dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster")))

    assert result.success
    assert _shard_steps(result, "training_rollouts") == ["training_0", "training_1"]
    batch = result.output_for_node("training_rollouts")

    settings = config.for_game("crafter")
    store = _clean_copy(tmp_path, storage).storage()
    start = start_proficiency_round(settings, store)
    spec = training_rollout_spec(settings, start.scaffold, start.seeds, store)
    whole = _one_process(resources, tmp_path, lambda clients: run_batch(spec, one_model(clients)))
    content = batch_content(batch)
    assert content == batch_content(whole.out_dir) and len(content[0]) == 3
