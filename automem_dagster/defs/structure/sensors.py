"""Sensors that chain rounds: evaluation -> promotion, and (opt-in) promotion -> next round; and
the one that gives every scaffold version on disk its ``scaffold_version`` partition.

The chaining sensors read every new materialization of their asset since their cursor (a storage id), in
order (``defs/plans/sensors.py``), so evaluations of several games finishing between two
ticks each get their own run; the run key is the materialization's storage id, so a
materialization starts one run only.
"""

import dagster as dg

from automem_dagster.defs.execution.partitions import scaffold_versions, version_key
from automem_dagster.defs.plans.sensors import after_new_champion, gate_sensor
from automem_dagster.defs.plans.versions import scaffold_version_event
from automem_dagster.defs.resources import StorageResource
from automem_dagster.defs.structure.jobs import promote_job, structure_round_job
from automem_dagster.games import families
from automem_dagster.loop.round_plan import STRUCTURE_ROUND
from automem_dagster.scaffold.io import list_versions

evaluation_gate_sensor = gate_sensor(
    "evaluation_gate_sensor", promote_job, STRUCTURE_ROUND, "candidate", "promote",
    lambda record: {"automem/evaluation": str(record.storage_id)},
    "Starts promote_job for the game of every new candidate_evaluation that evaluated a candidate, so the "
    "keep-or-rollback decision follows the evaluation. Rounds without a candidate (revision rejected) are "
    "skipped: there is nothing to promote.")


@dg.sensor(job=structure_round_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED)
def next_round_sensor(context: dg.SensorEvaluationContext):
    """Opt-in (stopped by default): after a ``champion_scaffold`` materialization that kept its
    candidate, start the next ``structure_round_job`` for that game, so a game keeps improving until a
    round fails to beat its champion (rounds the CLI ran are left to the CLI; ``automem rounds --patience 1``
    follows the same plan in one command). Turn it on in the UI (Automation) or with
    ``dagster sensor start next_round_sensor``."""
    return after_new_champion(context, "next-round")


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def scaffold_versions_sensor(context: dg.SensorEvaluationContext, storage: StorageResource):
    """Every scaffold version file that has no ``scaffold_version`` partition yet gets one,
    materialized with its YAML, content hash and fate: versions made outside a round that reports
    to this instance (``automem propose``, a DVC stage, a file written by hand, rounds run before
    the instance existed) show up beside those the rounds record themselves."""
    store = storage.storage()
    missing = [(family, version) for family in families() for version in list_versions(family, store.scaffolds)
               if not context.instance.has_dynamic_partition(scaffold_versions.name, version_key(family, version))]
    if not missing:
        return dg.SkipReason("every scaffold version on disk has its scaffold_version partition")
    # A tick that records versions requests no run; its message says what it recorded (without one,
    # Dagster files the tick as "Sensor function returned an empty result").
    recorded = ", ".join(version_key(family, version) for family, version in missing)
    return dg.SensorResult(asset_events=[scaffold_version_event(context.instance, store, family, version,
                                                                {"recorded_by": "scaffold_versions_sensor"})
                                         for family, version in missing],
                           skip_reason=dg.SkipReason(f"recorded the scaffold_version partitions {recorded}"))
