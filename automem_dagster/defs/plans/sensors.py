"""What the sensors share: every new materialization of an asset since the cursor, in order.

A sensor's cursor is the storage id of the last materialization it has seen, so several
materializations between two ticks (rounds of several games) each get their own run, and a
run key derived from the storage id makes one materialization start one run only.
"""

from collections.abc import Callable

import dagster as dg

from automem_dagster.defs.execution.run_tags import CLI_DRIVER, DRIVER_TAG
from automem_dagster.loop.round_plan import RoundPlan

BATCH = 100


def new_materializations(context: dg.SensorEvaluationContext, asset: str) -> list[dg.EventLogRecord]:
    """Materializations of ``asset`` after the cursor, oldest first (at most ``BATCH`` per tick)."""
    after = int(context.cursor) if context.cursor else None
    return list(context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), after_storage_id=after), limit=BATCH, ascending=True).records)


def metadata_text(record: dg.EventLogRecord, name: str) -> str | None:
    """A metadata entry of the materialization as text; None when it has none of that name."""
    value = record.asset_materialization.metadata.get(name)
    return None if value is None else str(value.value)


def decided_in_run(instance: dg.DagsterInstance, record: dg.EventLogRecord, decision: str) -> bool:
    """The run that materialized ``record`` also ran the ``decision`` asset (a whole-round job, as the CLI
    runs), so the decision was taken there and there is nothing left to promote."""
    if not record.run_id:
        return False
    planned = instance.get_records_for_run(record.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED)
    return any(r.event_log_entry.dagster_event.asset_key == dg.AssetKey(decision) for r in planned.records)


def driven_by_cli(instance: dg.DagsterInstance, record: dg.EventLogRecord) -> bool:
    """A materialization of a round the CLI ran (``defs/cli_rounds.py`` tags its runs): the CLI chains its
    own rounds (``automem rounds``), so the chaining sensors do not start another after it."""
    run = instance.get_run_by_id(record.run_id) if record.run_id else None
    return run is not None and run.tags.get(DRIVER_TAG) == CLI_DRIVER


def sensor_result(records: list[dg.EventLogRecord], requests: list[dg.RunRequest], skipped: str) -> dg.SensorResult:
    """The runs to start, or ``skipped`` as the skip reason; the cursor moves past ``records`` either way."""
    cursor = str(records[-1].storage_id)
    if requests:
        return dg.SensorResult(run_requests=requests, cursor=cursor)
    return dg.SensorResult(skip_reason=dg.SkipReason(skipped), cursor=cursor)


def promotion_requests(context: dg.SensorEvaluationContext, plan: RoundPlan, asset: str, challenger: str,
                       run_key_prefix: str, tags: Callable[[dg.EventLogRecord], dict[str, str]]
                       ) -> dg.SensorResult | dg.SkipReason:
    """The gate sensors of both loops: one promotion run (``plan.decision``) for the game of every new
    ``asset`` materialization that evaluated a ``challenger`` (candidate or adapter). Evaluations without
    one are skipped, since there is nothing to promote, and so are those whose run decided them itself."""
    records = new_materializations(context, asset)
    if not records:
        return dg.SkipReason(f"no new {asset} materialization")
    requests = []
    for record in records:
        if decided_in_run(context.instance, record, plan.decision):
            context.log.info(f"{record.partition_key}: evaluation {record.storage_id} was decided in its own run "
                             f"({plan.decision} ran there)")
            continue
        if metadata_text(record, "outcome") != "evaluated":
            context.log.info(f"{record.partition_key}: no {challenger} in evaluation {record.storage_id}, "
                             "nothing to promote")
            continue
        requests.append(dg.RunRequest(run_key=f"{run_key_prefix}-{record.storage_id}",
                                      partition_key=record.partition_key, tags=tags(record)))
    return sensor_result(records, requests, f"new evaluations had no {challenger}, or were decided in their own run")


def gate_sensor(name: str, job, plan: RoundPlan, challenger: str, run_key_prefix: str,
                tags: Callable[[dg.EventLogRecord], dict[str, str]], description: str) -> dg.SensorDefinition:
    """The one gate sensor of both loops, made for ``job`` (the loop's promotion): ``promotion_requests``
    on every new materialization of the plan's evaluation (the step before its decision), so the
    keep-or-rollback decision follows the evaluation."""
    evaluation = plan.round_steps[-1]

    @dg.sensor(name=name, job=job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
               description=description)
    def sensor(context: dg.SensorEvaluationContext):
        return promotion_requests(context, plan, evaluation, challenger, run_key_prefix, tags)

    return sensor


def after_new_champion(context: dg.SensorEvaluationContext, run_key_prefix: str) -> dg.SensorResult | dg.SkipReason:
    """One run for the game of every new ``champion_scaffold`` materialization that kept its
    candidate (a new champion); rounds the CLI ran are left to the CLI, which chains its own (``driven_by_cli``)."""
    records = new_materializations(context, "champion_scaffold")
    if not records:
        return dg.SkipReason("no new champion_scaffold materialization")
    requests = [dg.RunRequest(run_key=f"{run_key_prefix}-{r.storage_id}", partition_key=r.partition_key,
                              tags={"automem/after_promotion": str(r.storage_id)})
                for r in records if metadata_text(r, "decision") == "kept" and not driven_by_cli(context.instance, r)]
    return sensor_result(records, requests, "no new champion: the last rounds were rolled back or had no candidate")
