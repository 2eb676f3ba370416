"""deploy/dagster.yaml, the instance `make dagster` uses, loads and limits what it says it limits.

Validated by Dagster's own instance loader (the schema of docs.dagster.io "Run queue limits",
"Run tag concurrency limits" and "Concurrency pools"), and checked against the jobs: a limit on a
tag that no job carries would silently limit nothing.
"""

from pathlib import Path

import dagster as dg
import pytest
import yaml

from automem_dagster.defs.definitions import defs
from automem_dagster.defs.execution.run_tags import MODEL_ROUND_TAG

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "dagster.yaml"


def _instance(tmp_path: Path) -> dg.DagsterInstance:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(DEPLOY.read_text())
    return dg.DagsterInstance.from_config(str(home))


def test_instance_loads_with_the_run_queue_and_pool_limits(tmp_path):
    with _instance(tmp_path) as instance:
        config = instance.get_concurrency_config()
    queue = config.run_queue_config
    assert queue.max_concurrent_runs == 2
    limits = {limit["key"]: limit for limit in queue.tag_concurrency_limits}
    assert limits["dagster/partition"] == {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True},
                                           "limit": 1}
    assert limits[MODEL_ROUND_TAG]["limit"] == 1
    assert config.pool_config.default_pool_limit == 1


def test_every_run_tag_limit_matches_jobs_that_carry_the_tag():
    limits = yaml.safe_load(DEPLOY.read_text())["concurrency"]["runs"]["tag_concurrency_limits"]
    job_tags = {job.name: job.tags for job in defs.resolve_all_job_defs()}
    for limit in limits:
        if limit["key"].startswith("dagster/"):
            continue  # Dagster sets its own tags (dagster/partition on every partitioned run)
        carriers = [name for name, tags in job_tags.items() if tags.get(limit["key"]) == limit["value"]]
        assert carriers, f"no job carries {limit['key']}={limit['value']!r}: the limit in {DEPLOY.name} limits nothing"
    round_jobs = {name for name, tags in job_tags.items() if tags.get(MODEL_ROUND_TAG) == "true"}
    assert round_jobs == {"structure_round_job", "proficiency_round_job", "structure_full_round_job",
                          "proficiency_full_round_job"}


K8S = DEPLOY.parent / "k8s" / "dagster.yaml"


def _k8s_instance_config(tmp_path, monkeypatch) -> dict:
    from dagster._core.instance.config import dagster_instance_config

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(K8S.read_text())
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "not-used")
    return dagster_instance_config(str(home))[0]


def test_the_kubernetes_instance_loads_and_mounts_the_project_home(tmp_path, monkeypatch):
    """Every section by Dagster's own instance loader (no cluster, no database contacted)."""
    config = _k8s_instance_config(tmp_path, monkeypatch)
    launcher = config["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
    assert "postgres" in config["storage"]
    assert config["concurrency"]["runs"]["tag_concurrency_limits"][0]["key"] == "dagster/partition"
    # The shared project home is mounted where the image's AUTOMEM_HOME points.
    dockerfile = (DEPLOY.parent / "Dockerfile").read_text()
    mounts = {m["mount_path"] for m in launcher["config"]["volume_mounts"]}
    assert "AUTOMEM_HOME=/data/automem" in dockerfile and "/data/automem" in mounts


@pytest.mark.ci_required
def test_the_kubernetes_launcher_fields_pass_dagster_k8s_schema(tmp_path, monkeypatch):
    """The launcher's own fields against dagster-k8s's schema (docs.dagster.io, dagster-k8s API:
    K8sRunLauncher config). dagster-k8s is released a patch behind dagster and pins it exactly, so
    ``make install`` installs the pinned one (constraints.txt) without its dependencies; under CI a
    skip here is a failure."""
    from dagster._config import process_config

    dagster_k8s = pytest.importorskip("dagster_k8s", reason="dagster-k8s is not installed (see the docstring)")
    launcher = _k8s_instance_config(tmp_path, monkeypatch)["run_launcher"]
    checked = process_config(dagster_k8s.K8sRunLauncher.config_type(), launcher["config"])
    assert checked.success, [e.message for e in checked.errors]
    broken = {**launcher["config"], "volume_mount": []}
    assert not process_config(dagster_k8s.K8sRunLauncher.config_type(), broken).success


def test_the_kubernetes_instance_keeps_step_outputs_and_logs_on_the_shared_volume(tmp_path, monkeypatch):
    """With k8s_job_executor every shard step is a pod of its own and the merge step reads what the
    shard pods wrote: the IO manager's folder (the instance's storage directory) and the captured
    logs must be on the volume every pod mounts, beside the project home."""
    config = _k8s_instance_config(tmp_path, monkeypatch)
    mounts = {m["mount_path"] for m in config["run_launcher"]["config"]["volume_mounts"]}
    shared = [config["local_artifact_storage"]["config"]["base_dir"], config["compute_logs"]["config"]["base_dir"]]
    for path in shared:
        assert any(Path(path).is_relative_to(mount) for mount in mounts), (path, mounts)
    # The IO manager's default folder, as the instance derives it (Postgres, needed to open the whole
    # instance, is not installed here).
    from dagster._core.storage.root import LocalArtifactStorage

    artifacts = LocalArtifactStorage.from_config_value(None, config["local_artifact_storage"]["config"])
    assert artifacts.storage_dir == "/data/automem/dagster/storage"


def test_the_cli_rounds_instance_keeps_telemetry_off_whatever_the_home_says(tmp_path, monkeypatch):
    """A user's own ``$DAGSTER_HOME/dagster.yaml`` without a telemetry block turns Dagster's telemetry on, and
    with it the welcome banner printed into the round's output; the CLI's instance overrides it."""
    from automem_dagster.defs.cli_rounds import project_instance

    home = tmp_path / "own_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("run_queue:\n  max_concurrent_runs: 2\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert dg.DagsterInstance.from_config(str(home)).telemetry_enabled
    with project_instance() as instance:
        assert not instance.telemetry_enabled
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 2


POSTGRES = DEPLOY.parent / "dagster-postgres.yaml"


@pytest.mark.ci_required
@pytest.mark.parametrize("config_file", [POSTGRES, K8S], ids=["two-hosts", "kubernetes"])
def test_the_postgres_instances_name_a_driver_dagster_postgres_installs(config_file, tmp_path, monkeypatch):
    """dagster-postgres depends on psycopg2; SQLAlchemy 2.1 reads a plain ``postgresql://`` URL as psycopg 3, which
    nothing installs ("No module named 'psycopg'" when the instance opens). Each Postgres instance of deploy/ names
    the driver, and the URL Dagster builds from it loads that driver (no database contacted). Under CI a skip here
    (dagster-postgres not installed: the ``postgres`` extra) is a failure."""
    import sqlalchemy
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config

    dagster_postgres_utils = pytest.importorskip("dagster_postgres.utils", reason="the postgres extra is not installed")
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(config_file.read_text())
    for name, value in {"DAGSTER_PG_HOST": "10.77.0.1", "DAGSTER_PG_PASSWORD": "not-used",
                        "AUTOMEM_SHARED_DAGSTER": str(tmp_path / "shared")}.items():
        monkeypatch.setenv(name, value)
    postgres = dagster_instance_config(str(home))[0]["storage"]["postgres"]
    resolved = process_config(dagster_postgres_utils.pg_config(), postgres)  # {env: ...} read as Dagster reads it
    assert resolved.success, [e.message for e in resolved.errors]
    url = sqlalchemy.engine.make_url(dagster_postgres_utils.pg_url_from_config(resolved.value))
    assert url.drivername == "postgresql+psycopg2"
    assert url.get_dialect().import_dbapi().__name__ == "psycopg2"


def test_the_two_host_instance_keeps_step_outputs_in_the_shared_folder(tmp_path, monkeypatch):
    """deploy/two-hosts.sh's hosts share the step outputs' folder ($AUTOMEM_SHARED_DAGSTER), not DAGSTER_HOME."""
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster._core.storage.root import LocalArtifactStorage

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(POSTGRES.read_text())
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "not-used")
    monkeypatch.setenv("DAGSTER_PG_HOST", "10.77.0.1")
    monkeypatch.setenv("AUTOMEM_SHARED_DAGSTER", str(tmp_path / "shared"))
    config = dagster_instance_config(str(home))[0]
    resolved = process_config(LocalArtifactStorage.config_type(), config["local_artifact_storage"]["config"])
    artifacts = LocalArtifactStorage.from_config_value(None, resolved.value)
    assert artifacts.storage_dir == str(tmp_path / "shared" / "storage")
    assert config["storage"]["postgres"]["postgres_db"]["hostname"] == {"env": "DAGSTER_PG_HOST"}
