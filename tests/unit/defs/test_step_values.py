"""The values a round's assets pass to each other are typed (``defs/plans/values.py``) and come back as their
types through Dagster's IO manager, pickled to files and read by the next step as a step in another process
or on a Celery worker reads them. A round that resumes a pending candidate plays nothing and asks no model,
so its first three assets run in process here."""

import dagster as dg

from automem_dagster.defs.execution.step_values import StepValuesIOManager
from automem_dagster.defs.plans.values import Candidate, Resumed
from automem_dagster.defs.resources import default_resources
from automem_dagster.defs.structure.assets import diagnosis, rollout_batch, scaffold_candidate
from automem_dagster.loop.structure import PendingCandidate, register_candidate
from automem_dagster.scaffold import load_scaffold


def test_a_resumed_rounds_values_cross_the_assets_as_their_types(tmp_path, storage):
    store = storage.storage()
    champion = load_scaffold("crafter", 0, store.scaffolds)
    register_candidate(champion.model_copy(update={"version": 1, "parent": 0}), 0, None, store, store.runs)
    assets = [rollout_batch, diagnosis, scaffold_candidate]
    resources = {**default_resources(), "storage": storage,
                 "io_manager": StepValuesIOManager(base_dir=str(tmp_path / "step_values"))}
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster"))
    result = dg.materialize(assets, partition_key="crafter", resources=resources, instance=instance)
    assert result.success

    stored = dg.Definitions(assets=assets, resources=resources)
    [rollout, diagnosed, candidate] = (stored.load_asset_value(asset.key, instance=instance, partition_key="crafter")
                                       for asset in assets)
    pending = PendingCandidate(1)
    assert isinstance(rollout, Resumed) and rollout.pending == pending and "v1" in rollout.reason
    assert diagnosed == rollout  # passed on, as every step before the challenger's passes it
    assert candidate == Candidate("crafter", "resumed", parent=0, candidate=1)
    # The rollout asset's plan step gave its merge step the same value, typed, through the same IO manager.
    assert result.output_for_node("rollout_batch.rollout_batch_plan", "plan") == rollout
