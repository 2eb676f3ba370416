"""The sensor that chains a proficiency round to its decision: evaluation -> promotion.

It reads every new ``specialist_evaluation`` materialization since its cursor, in order
(``defs/common/sensors.py``), so evaluations of several games between two ticks each get
their promotion, and the run key (the materialization's storage id) starts one run only.
"""

import dagster as dg

from automem_dagster.defs.common.sensors import metadata_text, new_materializations, sensor_result
from automem_dagster.defs.proficiency.jobs import promote_specialist_job


@dg.sensor(job=promote_specialist_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def specialist_gate_sensor(context: dg.SensorEvaluationContext):
    """Starts ``promote_specialist_job`` for the game of every new ``specialist_evaluation`` that
    evaluated an adapter, so the keep-or-rollback decision follows the evaluation."""
    records = new_materializations(context, "specialist_evaluation")
    if not records:
        return dg.SkipReason("no new specialist_evaluation materialization")
    requests = []
    for record in records:
        if metadata_text(record, "outcome") != "evaluated":
            context.log.info(f"{record.partition_key}: no adapter in evaluation {record.storage_id}, nothing to promote")
            continue
        requests.append(dg.RunRequest(run_key=f"promote-specialist-{record.storage_id}",
                                      partition_key=record.partition_key,
                                      tags={"automem/specialist_evaluation": str(record.storage_id),
                                            "automem/adapter": metadata_text(record, "adapter") or ""}))
    return sensor_result(records, requests, "new evaluations had no adapter")
