"""The sensor that chains a proficiency round to its decision: evaluation -> promotion.

It reads every new ``specialist_evaluation`` materialization since its cursor, in order
(``defs/common/sensors.py``), so evaluations of several games between two ticks each get
their promotion, and the run key (the materialization's storage id) starts one run only.
"""

import dagster as dg

from automem_dagster.defs.common.sensors import metadata_text, promotion_requests
from automem_dagster.defs.proficiency.jobs import promote_specialist_job


@dg.sensor(job=promote_specialist_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def specialist_gate_sensor(context: dg.SensorEvaluationContext):
    """Starts ``promote_specialist_job`` for the game of every new ``specialist_evaluation`` that
    evaluated an adapter, so the keep-or-rollback decision follows the evaluation."""
    return promotion_requests(
        context, "specialist_evaluation", "adapter", "promote-specialist",
        lambda record: {"automem/specialist_evaluation": str(record.storage_id),
                        "automem/adapter": metadata_text(record, "adapter") or ""})
