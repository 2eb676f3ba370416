"""What the sensors share: every new materialization of an asset since the cursor, in order.

A sensor's cursor is the storage id of the last materialization it has seen, so several
materializations between two ticks (rounds of several games) each get their own run, and a
run key derived from the storage id makes one materialization start one run only.
"""

import dagster as dg

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


def sensor_result(records: list[dg.EventLogRecord], requests: list[dg.RunRequest], skipped: str) -> dg.SensorResult:
    """The runs to start, or ``skipped`` as the skip reason; the cursor moves past ``records`` either way."""
    cursor = str(records[-1].storage_id)
    if requests:
        return dg.SensorResult(run_requests=requests, cursor=cursor)
    return dg.SensorResult(skip_reason=dg.SkipReason(skipped), cursor=cursor)
