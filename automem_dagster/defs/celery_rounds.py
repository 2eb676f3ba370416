"""A CLI round on Dagster's Celery executor (``automem revise|rounds|train --executor celery``).

An in-process run can execute a job built on the spot; a step sent to a Celery worker cannot: the
worker rebuilds the job from code it can import. So the run names ``celery_round_job`` of this module
with the round job's name (the project's definitions, with ``celery_executor`` in place of their
default), and everything else travels in the run config: each step's settings, the resources (the
endpoints file, the storage folders, the tracking store: paths every worker must see) and the
executor's settings (``defs/execution/celery.py``). The workers are ``automem worker`` processes with the
same ``DAGSTER_HOME``, broker and visibility timeout.

A step that fails on a worker reaches this process as an event, not an exception: the round raises a
``RoundError`` with the step's error, and a run that fails outside its steps (a broker gone) with the
run's own message. A dataset below the minimum is no failure: the run succeeds without the steps after
curation, as in process.
"""

from __future__ import annotations

import math
from pathlib import Path

import dagster as dg

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.definitions import defs
from automem_dagster.defs.execution.celery import celery_config, visibility_timeout
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.execution import Execution
from automem_dagster.rollout.seeds import eval_seeds


def celery_round_job(name: str) -> dg.JobDefinition:
    """The project's job ``name`` on the Celery executor: what the run and every worker reconstruct."""
    from dagster_celery import celery_executor

    return defs.resolve_job_def(name).with_executor_def(celery_executor)


def run_on_celery(job: str, game: str, steps: tuple[str, ...], config: RoundConfig, run_config: dict,
                  resources: dict, instance: dg.DagsterInstance, execution: Execution, tags: dict) -> tuple[dict, str]:
    """Execute ``job`` for ``game`` (its partition in ``tags``) on the workers of ``execution.broker``, every step
    configured with ``config`` (``run_config`` carries it); returns each of ``steps``' values (None for a step
    the run did not reach) and the run's id."""
    try:
        import dagster_celery  # noqa: F401
    except ImportError as exc:
        raise RoundError("--executor celery needs the celery extra: pip install 'automem-dagster[celery]'") from exc
    visibility = execution.visibility_timeout or derived_visibility(config, resources, game)
    whole = {**run_config, "resources": {name: {"config": resource.model_dump(exclude_none=True)}
                                         for name, resource in resources.items()},
             "execution": {"config": celery_config(execution.broker, visibility)}}
    recon = dg.build_reconstructable_job(__name__, "celery_round_job", reconstructable_args=(job,))
    with dg.execute_job(recon, instance, run_config=whole, tags=tags) as result:
        if not result.success:
            raise failure(result, execution.broker)
        made = {event.asset_key.to_user_string() for event in result.all_events
                if event.event_type_value == "ASSET_MATERIALIZATION"}
    # Read as the next run's steps would (the asset's own path), not through the run's step outputs.
    return {step: defs.load_asset_value(step, instance=instance, partition_key=tags["dagster/partition"])
            if step in made else None for step in steps}, result.run_id


def derived_visibility(config: RoundConfig, resources: dict, game: str) -> int:
    """``visibility_timeout`` for the round's budget (``config``): its longest episodes, its largest batch split
    in its shards, at the game endpoint's timeout per call."""
    budget = config.budget
    evaluated = budget.eval_episodes or len(eval_seeds(game, Path(resources["storage"].seeds_file)))
    seeds = config.shard_size or math.ceil(max(budget.rollout_episodes, evaluated) / config.shards)
    return visibility_timeout(max(budget.rollout_max_steps, budget.eval_max_steps), seeds,
                              budget.concurrency, resources["endpoints"].config().game.timeout_s)


def failure(result, broker: str) -> Exception:
    """The error a failed run raises here: the first failed step's, else the run's own."""
    for event in result.get_step_failure_events():
        chain = _chain(event.step_failure_data.error)
        return RoundError(f"step {event.step_key} failed on a Celery worker: "
                          f"{' <- '.join(e.message.strip() for e in chain)}")
    errors = [e for event in result.all_events for e in _chain(getattr(event.event_specific_data, "error", None))]
    said = "; ".join(dict.fromkeys(" ".join(e.message.split()) for e in errors)) \
        or (result.get_run_failure_event().message or "")
    return RoundError(f"the round's run on the Celery executor failed ({said}); check that the broker {broker} "
                      "is up and that `automem worker` processes serve it")


def _chain(error) -> list:
    """An error with its causes and contexts, outermost first."""
    found = []
    while error is not None:
        found.append(error)
        error = error.cause or error.context
    return found
