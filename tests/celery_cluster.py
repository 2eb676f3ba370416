"""Real Celery workers for a test: redis-server and ``automem worker`` processes on 127.0.0.1
(``started_cluster``), and the rollout job they run, which they rebuild by this module's name from
``tests/`` (on their PYTHONPATH), as pytest imported it."""

import contextlib
import os
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml
from sharded_rollouts import TESTS

from automem_dagster.defs.resources import LLMEndpointsResource, MlflowResource, StorageResource
from automem_dagster.defs.structure.assets import rollout_batch
from benchmarks.celery_level import local_cluster

PATHS_ENV = "AUTOMEM_TEST_CELERY_PATHS"
"""A file naming the test's endpoints and storage: the workers, started once, read it at each step."""


def celery_rollout_job():
    """The rollout asset alone, under the Celery executor, on the files named in $AUTOMEM_TEST_CELERY_PATHS."""
    from dagster_celery import celery_executor

    paths = yaml.safe_load(Path(os.environ[PATHS_ENV]).read_text())
    resources = {"endpoints": LLMEndpointsResource(endpoints_file=paths["endpoints"]),
                 "storage": StorageResource(runs=paths["runs"], scaffolds=paths["scaffolds"], lineage=paths["lineage"],
                                            specialists=paths["specialists"]),
                 "mlflow": MlflowResource(tracking_uri=paths["mlflow"])}
    job = dg.define_asset_job("celery_rollout", selection=[rollout_batch], executor_def=celery_executor)
    return dg.Definitions(assets=[rollout_batch], jobs=[job], resources=resources).resolve_job_def("celery_rollout")


@contextlib.contextmanager
def started_cluster(tmp_path: Path, home: Path, workers: int = 2, visibility_s: int = 3600,
                    worker_args: tuple[str, ...] = ()):
    """redis-server and ``workers`` ``automem worker`` processes on 127.0.0.1 (``benchmarks.celery_level``'s
    ``local_cluster``: a migrated instance in DAGSTER_HOME ``home``, each worker the leader of its own process
    group, all stopped by PID), able to import this module's jobs; skipped where Redis or the extra is missing."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    pytest.importorskip("dagster_celery", reason="the celery extra is not installed")
    paths = tmp_path / "paths.yaml"
    env = {PATHS_ENV: str(paths), "PYTHONPATH": os.pathsep.join([str(TESTS),
                                                                os.environ.get("PYTHONPATH", "")])}
    with local_cluster(tmp_path, home, workers, visibility_s, env, worker_args) as cluster:
        cluster.paths = paths
        yield cluster


def celery_rollout_job_handle():
    """``celery_rollout_job`` as a job the workers rebuild: imported by module name from ``tests/``."""
    return dg.build_reconstructable_job("celery_cluster", "celery_rollout_job", reconstructor_working_directory=str(TESTS))
