"""A round the CLI ran, read back from the Dagster instance it reported to (``$DAGSTER_HOME``): the latest
materialization of an asset, and the check that a round was one run of its job tagged as the CLI's.
Also the structure round's settings and endpoints file that the CLI-round tests share."""

import builders
import dagster as dg
from dagster_round_rules import RUN_CONFIG

SETTINGS = RUN_CONFIG.ops["rollout_batch"].for_game("crafter")


def endpoints_file(tmp_path, server, roles=("game", "meta"), memory=None):
    return builders.endpoints_file(tmp_path / "endpoints.yaml", server, roles, memory)


def latest_record(instance: dg.DagsterInstance, asset: str, partition: str = "crafter") -> dg.EventLogRecord:
    [record] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
    return record


def latest(instance: dg.DagsterInstance, asset: str, partition: str = "crafter") -> dict:
    return {k: v.value for k, v in latest_record(instance, asset, partition).asset_materialization.metadata.items()}


def one_cli_run(instance: dg.DagsterInstance, assets: list[str], job: str) -> None:
    """Every one of ``assets`` was materialized by one successful run of ``job``, tagged as the CLI's."""
    [run_id] = {latest_record(instance, asset).run_id for asset in assets}
    run = instance.get_run_by_id(run_id)
    assert run.job_name == job and run.status == dg.DagsterRunStatus.SUCCESS
    assert run.tags["automem/driver"] == "cli" and run.tags["dagster/partition"] == "crafter"
