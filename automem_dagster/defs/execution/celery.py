"""Dagster's Celery executor as the project runs it (docs/scale.md): the settings a lost worker needs.

A shard step sent to a Celery worker is acknowledged only when it ends (``task_acks_late``), and a
worker process that dies under it gives it back to the broker (``task_reject_on_worker_lost``), so
another worker plays it; because a shard resumes its finished seeds and its interrupted episode
(``rollout.shards``), nothing is played twice into the batch. Celery's defaults ack on receipt: a
worker killed mid-shard then fails the whole run ("WorkerLostError ... signal 9").

A whole worker lost (its machine gone) is noticed only when Redis's ``visibility_timeout`` passes:
it must be longer than the longest shard, or a shard still running is delivered a second time; the
longer it is, the longer a lost shard waits. ``visibility_timeout`` derives it from the round's
budget (a worst case: smaller shards or shorter endpoint timeouts bring it down). The surviving workers
look for such shards every ``restore_interval`` seconds.

Shard steps go to one queue per game endpoint pool (``queue_tags``): a worker started near a model
replica with ``automem worker --queue <pool>`` serves that replica's shards; every other step goes
to Dagster's default queue. The ``game_endpoint`` pool's limit (deploy/dagster.yaml) is still
applied by the run before a step is sent (dagster-celery's execution loop takes the instance's
concurrency slots as the multiprocess executor does).
"""

import math

DEFAULT_QUEUE = "dagster"
"""dagster-celery's queue for steps without a queue tag (``dagster_celery.defaults.task_default_queue``)."""
QUEUE_TAG = "dagster-celery/queue"
"""The op tag dagster-celery routes a step by (``dagster_celery.tags.DAGSTER_CELERY_QUEUE_TAG``)."""
CALLS_PER_STEP = 3
"""Model calls an agent step may make at most (plan, act, memory), each bounded by its endpoint's timeout."""


def visibility_timeout(max_steps: int, seeds_per_shard: int, concurrency: int, call_timeout_s: float) -> int:
    """Seconds Redis waits before handing an unacknowledged shard to another worker: the longest a
    shard of this budget can take (every call of every step at its timeout, ``concurrency`` episodes
    at once), plus a minute; never under five minutes."""
    waves = math.ceil(seeds_per_shard / max(concurrency, 1))
    return max(300, int(waves * max_steps * CALLS_PER_STEP * call_timeout_s) + 60)


def celery_config(broker: str, visibility_s: int, backend: str | None = None, overrides: dict | None = None) -> dict:
    """The ``celery_executor``'s config (the ``execution: config:`` of a run, and what ``automem worker``
    starts its workers with: both sides must agree). The result backend is the broker unless given;
    ``overrides`` (Celery settings, ``automem worker --config-yaml``) replace the project's by key."""
    return {"broker": broker, "backend": backend or broker,
            "config_source": {**project_settings(visibility_s), **(overrides or {})}}


def project_settings(visibility_s: int) -> dict:
    """The project's Celery settings: acks when a shard ends, a lost worker's shard given back, one task
    prefetched, and Redis's visibility timeout with a restore sweep that finds a lost shard soon after it."""
    return {"task_acks_late": True, "task_reject_on_worker_lost": True, "worker_prefetch_multiplier": 1,
            "broker_connection_retry_on_startup": False,
            "broker_transport_options": {"visibility_timeout": visibility_s,
                                         "unacked_restore_interval": restore_interval(visibility_s),
                                         "unacked_restore_throttle": 1, "max_retries": 3, "interval_start": 0,
                                         "interval_step": 0.2, "interval_max": 0.5}}


def restore_interval(visibility_s: int) -> int:
    """Seconds between a worker's sweeps for shards whose visibility timeout passed: a tenth of it, 1 to 10
    s. kombu's default sweeps every 10 s but scans Redis on every 10th sweep only (``unacked_restore_throttle``
    10): a lost shard then waits up to 100 s past its timeout; with the throttle at 1 it waits one interval."""
    return max(1, min(10, visibility_s // 10))


def queue_tags(pool: str) -> dict:
    """The op tags that send a step of endpoint pool ``pool`` to that pool's queue."""
    return {QUEUE_TAG: pool}
