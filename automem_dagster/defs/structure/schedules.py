"""The weekly structure round (opt-in)."""

import dagster as dg

from automem_dagster.defs.execution.partitions import game_partitions
from automem_dagster.defs.structure.jobs import structure_round_job


@dg.schedule(cron_schedule="0 3 * * 1", job=structure_round_job, execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED)
def weekly_structure_round(context: dg.ScheduleEvaluationContext):
    """Mondays 03:00 UTC: one structure round per game (stopped by default; start it in the UI).
    Each round's evaluation then triggers its promotion through ``evaluation_gate_sensor``."""
    stamp = context.scheduled_execution_time.strftime("%Y-%m-%dT%H:%M")
    for key in game_partitions.get_partition_keys():
        yield dg.RunRequest(run_key=f"{key}-{stamp}", partition_key=key, tags={"automem/trigger": "weekly"})
