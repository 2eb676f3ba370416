"""The Celery options as a user meets them before any worker runs: a round's bad ``--shards`` or
``--visibility-timeout`` refused by name, a worker that cannot reach its instance or its broker saying
which and exiting 3, a worker's ``--config-yaml`` read or refused by name, ``--migrate`` warning of a
``game_endpoint`` pool that plays one shard at a time, and how often workers look for the shards of a
lost worker."""

import shutil
from pathlib import Path

import pytest

from automem_dagster import cli
from automem_dagster.defs.execution.celery import celery_config, restore_interval


@pytest.mark.parametrize("option", [["--shards", "0"], ["--visibility-timeout", "0"]])
def test_a_round_refuses_a_bad_executor_option_by_name(option, capsys):
    assert cli.main(["revise", "--game", "crafter", "--executor", "celery", *option, "--no-tracking"]) == 2
    assert option[0] in capsys.readouterr().err


def test_a_worker_without_an_instance_says_to_migrate_and_exits_3(tmp_path, monkeypatch, capsys):
    pytest.importorskip("dagster_celery", reason="the celery extra is not installed")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "nowhere"))
    assert cli.main(["worker"]) == 3
    said = " ".join(capsys.readouterr().err.split())
    assert "instance: no Dagster instance in" in said and "automem worker --migrate" in said


def test_workers_sweep_for_lost_shards_a_tenth_of_the_timeout_apart_and_scan_each_time():
    assert [restore_interval(v) for v in (5, 25, 90, 9060)] == [1, 2, 9, 10]
    options = celery_config("redis://b:6379/0", 25)["config_source"]["broker_transport_options"]
    assert options["visibility_timeout"] == 25 and options["unacked_restore_interval"] == 2
    assert options["unacked_restore_throttle"] == 1


@pytest.mark.parametrize("text", ["task_acks_late: false\n", "config_source: [1]\n", "config_source: {a: [\n"])
def test_a_worker_refuses_a_config_yaml_not_holding_config_source_settings(text, tmp_path, capsys):
    config = tmp_path / "celery.yaml"
    config.write_text(text)
    assert cli.main(["worker", "--config-yaml", str(config)]) == 3
    assert f"--config-yaml {config}:" in " ".join(capsys.readouterr().err.split())


def test_config_yaml_settings_replace_the_projects_by_key():
    source = celery_config("redis://b:6379/0", 25, overrides={"task_acks_late": False})["config_source"]
    assert source["task_acks_late"] is False and source["task_reject_on_worker_lost"] is True
    assert source["broker_transport_options"]["visibility_timeout"] == 25


def test_migrate_warns_when_the_game_endpoint_pool_takes_one_shard_at_a_time(tmp_path, monkeypatch, capsys):
    import dagster as dg

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(Path(__file__).resolve().parents[3] / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert cli.main(["worker", "--migrate"]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "game_endpoint pool" in said and "dagster instance concurrency set game_endpoint N" in said, said
    with dg.DagsterInstance.from_config(str(home)) as instance:   # what `dagster instance concurrency set` stores
        instance.event_log_storage.set_concurrency_slots("game_endpoint", 4)
    assert cli.main(["worker", "--migrate"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_visibility_timeout_is_derived_from_the_rounds_typed_config(storage):
    """The longest episodes of the round's budget, its largest batch split in its shards (or ``shard_size``),
    at the game endpoint's timeout per call."""
    from automem_dagster.defs.celery_rounds import derived_visibility
    from automem_dagster.defs.common.config import RoundConfig
    from automem_dagster.defs.execution.celery import visibility_timeout
    from automem_dagster.defs.resources import LLMEndpointsResource

    resources = {"storage": storage, "endpoints": LLMEndpointsResource()}
    timeout = resources["endpoints"].config().game.timeout_s
    budget = {"rollout_episodes": 8, "rollout_max_steps": 50, "eval_episodes": 4, "eval_max_steps": 20,
              "concurrency": 2}
    assert derived_visibility(RoundConfig(budget=budget, shards=2), resources, "crafter") == \
        visibility_timeout(50, 4, 2, timeout) == max(300, int(2 * 50 * 3 * timeout) + 60)
    assert derived_visibility(RoundConfig(budget=budget, shard_size=3), resources, "crafter") == \
        visibility_timeout(50, 3, 2, timeout)
