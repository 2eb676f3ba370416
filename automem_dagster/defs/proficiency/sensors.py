"""The sensors of the proficiency loop: evaluation -> promotion, and (opt-in) a new champion
scaffold -> a proficiency round on it.

Each reads every new materialization of its asset (``specialist_evaluation``, ``champion_scaffold``)
since its cursor, in order (``defs/plans/sensors.py``), so materializations of several games between
two ticks each get their run, and the run key (the materialization's storage id) starts one run only.
"""

import dagster as dg

from automem_dagster.defs.plans.sensors import after_new_champion, gate_sensor, metadata_text
from automem_dagster.defs.proficiency.jobs import proficiency_round_job, promote_specialist_job
from automem_dagster.loop.round_plan import PROFICIENCY_ROUND

specialist_gate_sensor = gate_sensor(
    "specialist_gate_sensor", promote_specialist_job, PROFICIENCY_ROUND, "adapter", "promote-specialist",
    lambda record: {"automem/specialist_evaluation": str(record.storage_id),
                    "automem/adapter": metadata_text(record, "adapter") or ""},
    "Starts promote_specialist_job for the game of every new specialist_evaluation that evaluated an adapter, "
    "so the keep-or-rollback decision follows the evaluation.")


@dg.sensor(job=proficiency_round_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED)
def new_champion_sensor(context: dg.SensorEvaluationContext):
    """Opt-in (stopped by default, a round trains a model): after ``champion_scaffold`` keeps a new
    champion, start ``proficiency_round_job`` for that game, since the specialist learnt from the old
    champion's decisions (Dagster marks its ``training_rollouts`` stale). Turn it on in the UI
    (Automation) or with ``dagster sensor start new_champion_sensor``."""
    return after_new_champion(context, "proficiency-after-champion")
