"""``automem worker``: a Celery worker for Dagster's Celery executor (docs/scale.md), and
``automem worker --migrate``, which prepares the Dagster instance once before any worker starts.

A worker runs the steps of runs whose executor is ``celery_executor`` with the same settings
(``defs/execution/celery.py``), the same ``DAGSTER_HOME`` (the instance every step reports to) and the
same ``AUTOMEM_HOME`` (the project's files) as the run. It checks the instance, the shared folders
(``worker_share``: the project home and the step outputs at the paths ``--migrate`` marked) and the broker
before it starts and says which one it lacks, with a non-zero exit: a worker that came up without them
would take shards and fail each one.

Two workers creating a SQLite instance at once fail ("table secondary_indexes already exists"), so a
worker never creates the instance: ``--migrate`` does, once.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from pathlib import Path

import yaml

from automem_dagster.commands.render import console
from automem_dagster.commands.worker_share import ShareMissing, check_shared_folders, mark_shared_folders
from automem_dagster.loop.execution import DEFAULT_BROKER, EXECUTORS, Execution
from automem_dagster.paths import PROJECT_ROOT

HTTP_LOGGERS = ("httpx", "httpcore", "httpx2", "httpcore2")
"""The loggers of the HTTP clients under the model calls (openai's httpx, and httpx2 of ``llm/attempts.py``)."""


def add_executor_args(p: argparse.ArgumentParser) -> None:
    """The options of a whole round (``revise``, ``rounds``, ``train``) that say where its steps run."""
    p.add_argument("--executor", choices=EXECUTORS, default=os.environ.get("AUTOMEM_EXECUTOR", "in_process"),
                   help="where the round's steps run: in_process (default; $AUTOMEM_EXECUTOR) or celery (Celery "
                        "workers started with `automem worker`, docs/scale.md)")
    p.add_argument("--shards", type=int, default=1,
                   help="seed shards per batch, each its own step (a task for a worker with --executor celery); default 1")
    p.add_argument("--broker", default=os.environ.get("AUTOMEM_CELERY_BROKER", DEFAULT_BROKER),
                   help="with --executor celery: the workers' broker ($AUTOMEM_CELERY_BROKER; default %(default)s)")
    p.add_argument("--visibility-timeout", type=int, default=None,
                   help="with --executor celery: seconds before a lost worker's step is redelivered; start the workers "
                        "with the same value (default: the longest a shard of this budget can take, at least 300)")


def execution_of(args: argparse.Namespace) -> Execution:
    if args.shards < 1:
        raise argparse.ArgumentTypeError(f"--shards {args.shards}: use 1 or more seed shards per batch")
    if args.visibility_timeout is not None and args.visibility_timeout < 1:
        raise argparse.ArgumentTypeError(f"--visibility-timeout {args.visibility_timeout}: use 1 or more seconds")
    return Execution(args.executor, args.broker, args.shards, args.visibility_timeout)


class WorkerSetupError(RuntimeError):
    """What a worker cannot reach (the instance or the broker), and what to do."""


def register(sub) -> None:
    parser = sub.add_parser("worker", help="Start a Celery worker for rounds run with --executor celery "
                                           "(or --migrate the Dagster instance once before the first worker)")
    parser.add_argument("--broker", default=os.environ.get("AUTOMEM_CELERY_BROKER", DEFAULT_BROKER),
                        help="the broker URL the runs use ($AUTOMEM_CELERY_BROKER; default %(default)s)")
    parser.add_argument("--queue", action="append", default=None,
                        help="a queue to serve: 'dagster' (every step but the shards) or an endpoint pool "
                             "('game_endpoint'); repeatable; default both")
    parser.add_argument("--concurrency", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--name", default=None, help="the worker's name (default automem-<pid>@<host>)")
    parser.add_argument("--visibility-timeout", type=int, default=3600,
                        help="seconds before an unacknowledged shard is redelivered; the run's value "
                             "(defs/execution/celery.py visibility_timeout)")
    parser.add_argument("--config-yaml", type=Path, default=None,
                        help="a YAML file of Celery settings laid over the project's, under config_source: as in "
                             "a run's `execution: config:` (e.g. task_acks_late: false); the runs must use the same")
    parser.add_argument("--migrate", action="store_true",
                        help="create or migrate the instance in $DAGSTER_HOME, then exit (once, before workers)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.migrate:
            migrate_instance()
            return 0
        return start_worker(args.broker, args.queue or ["dagster", "game_endpoint"], args.concurrency,
                            args.name or f"automem-{os.getpid()}@{socket.gethostname()}", args.visibility_timeout,
                            celery_overrides(args.config_yaml))
    except WorkerSetupError as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        return 3


def dagster_home() -> Path:
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise WorkerSetupError("instance: DAGSTER_HOME is not set; set it to the run's Dagster home "
                               "(the same folder on every machine, or a dagster.yaml naming a shared Postgres)")
    return Path(home)


def migrate_instance() -> None:
    """Create the instance's storage, or bring it to this Dagster's schema (``dagster instance migrate``)."""
    import dagster as dg

    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.upgrade()
        warn_of_one_shard_at_a_time(instance, home)
        folders = mark_shared_folders(instance, PROJECT_ROOT)
    console.print(f"instance in {home} ready for workers; every worker must see "
                  + ", ".join(f"the {what} at {folder}" for what, folder in folders.items()), soft_wrap=True)


def warn_of_one_shard_at_a_time(instance, home: Path) -> None:
    """The run takes a ``game_endpoint`` slot before it sends a shard step to the workers, so a pool limit of
    1 (deploy/dagster.yaml's ``default_limit``) plays a Celery round's shards one at a time, whatever the
    workers could take: say so, and how to raise it, where the workers are set up."""
    from automem_dagster.defs.execution.shards import GAME_ENDPOINT_POOL

    limit = instance.event_log_storage.get_concurrency_info(GAME_ENDPOINT_POOL).limit
    if limit is not None and limit < 2:
        console.print(f"[yellow]warning:[/yellow] the {GAME_ENDPOINT_POOL} pool of the instance in {home} takes "
                      f"{limit} step at a time, so a round on the workers plays its shards one after another; "
                      f"raise it to the worker processes in all: `dagster instance concurrency set "
                      f"{GAME_ENDPOINT_POOL} N`", soft_wrap=True)


def check_instance() -> None:
    """The instance opens without being created: a SQLite one (no storage named in dagster.yaml) must
    already hold its run database, which ``--migrate`` made."""
    import dagster as dg

    home = dagster_home()
    config_file = home / "dagster.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.exists() else None
    named_storage = isinstance(config, dict) and any(k in config for k in ("storage", "run_storage"))
    if not named_storage and not (home / "history" / "runs.db").exists():
        raise WorkerSetupError(f"instance: no Dagster instance in {home}; run `automem worker --migrate` "
                               "once before starting workers")
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            instance.get_runs(limit=1)
            check_shared_folders(instance, PROJECT_ROOT)
    except ShareMissing as exc:
        raise WorkerSetupError(str(exc)) from exc
    except Exception as exc:  # the storage's own error (a Postgres refusing, a bad dagster.yaml) is the message
        raise WorkerSetupError(f"instance: cannot open the Dagster instance in {home}: {exc}") from exc


def celery_overrides(path: Path | None) -> dict:
    """The Celery settings of ``--config-yaml``: the ``config_source`` mapping of a ``celery_executor`` config
    block (what ``dagster-celery worker start -y`` reads), the only key the file may hold here."""
    if path is None:
        return {}
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise WorkerSetupError(f"--config-yaml {path}: cannot read it as YAML: {exc}") from exc
    if not isinstance(config, dict) or set(config) != {"config_source"} or not isinstance(config["config_source"], dict):
        raise WorkerSetupError(f"--config-yaml {path}: expected one key, config_source, holding a mapping of Celery "
                               "settings (e.g. config_source: {task_acks_late: false}); give the broker with --broker")
    return config["config_source"]


def celery_app(broker: str, visibility_s: int, overrides: dict | None = None):
    """dagster-celery's app with the project's settings (``overrides`` laid over them) and its step task, as
    ``dagster_celery.app`` builds it."""
    from dagster_celery.executor import CeleryExecutor
    from dagster_celery.make_app import make_app
    from dagster_celery.tasks import create_task

    from automem_dagster.defs.execution.celery import celery_config

    app = make_app(CeleryExecutor.for_cli(**celery_config(broker, visibility_s, overrides=overrides)).app_args())
    create_task(app)
    return app


def check_broker(app, broker: str) -> None:
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=5)
    except Exception as exc:  # kombu's OperationalError and the socket errors under it
        raise WorkerSetupError(f"broker: cannot reach the broker at {broker}: {exc}; start it "
                               "(e.g. redis-server) or pass --broker / $AUTOMEM_CELERY_BROKER") from exc


def start_worker(broker: str, queues: list[str], concurrency: int, name: str, visibility_s: int,
                 overrides: dict | None = None) -> int:
    try:
        import dagster_celery  # noqa: F401
    except ImportError as exc:
        raise WorkerSetupError("the Celery executor needs the celery extra: pip install 'automem-dagster[celery]'") from exc
    check_instance()
    # Loaded once here, before the pool forks: each step rebuilds its job from these definitions
    # (defs/celery_rounds.py), and a pool process would otherwise import them inside its first step.
    import automem_dagster.defs.celery_rounds  # noqa: F401

    app = celery_app(broker, visibility_s, overrides)
    check_broker(app, broker)
    # The HTTP clients log every model call at INFO, which Celery's --loglevel=INFO would write: a line a call.
    for client in HTTP_LOGGERS:
        logging.getLogger(client).setLevel(logging.WARNING)
    console.print(f"worker {name}: broker {broker}, queues {', '.join(queues)}, {concurrency} process(es), "
                  f"acks late {app.conf.task_acks_late}, reject on worker lost {app.conf.task_reject_on_worker_lost}, "
                  f"DAGSTER_HOME={dagster_home()}, AUTOMEM_HOME={os.environ.get('AUTOMEM_HOME', '(the checkout)')}")
    app.worker_main(["worker", "-Q", ",".join(queues), "-c", str(concurrency), "-n", name,
                     "--prefetch-multiplier=1", "--loglevel=INFO", "--without-gossip", "--without-mingle"])
    return 0
