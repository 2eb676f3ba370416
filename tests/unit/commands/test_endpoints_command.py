"""``automem endpoints``: the schemas a user can check against a provider fit OpenAI's strict subset, and the
pre-round check names an unset key variable without sending a request."""

import json

import pytest
from endpoints_command import run_check

from automem_dagster.cli import main
from automem_dagster.llm.strict_schema import strict_violations

GAMES = ("crafter", "minihack:Corridor-R3", "nethack")


@pytest.mark.parametrize("game", GAMES)
def test_every_schema_sent_fits_openais_strict_subset(game, capsys):
    assert main(["endpoints", "schemas", "--game", game]) == 0
    schemas = json.loads(capsys.readouterr().out)
    assert {"log_turn", "plan_turn", "action_turn", "diagnosis", "revision", "review", "lora_settings"} <= set(schemas)
    assert {name: strict_violations(s) for name, s in schemas.items()} == {name: [] for name in schemas}


def test_check_names_an_unset_key_variable_without_a_request(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("AUTOMEM_NO_SUCH_KEY", raising=False)
    body = "game: {name: game, base_url: 'http://127.0.0.1:9/v1', api_key_env: AUTOMEM_NO_SUCH_KEY}\n"
    code, out = run_check(tmp_path, capsys, body, "--dry-run")
    assert code == 1 and "$AUTOMEM_NO_SUCH_KEY, which is not set" in out


def test_check_lists_the_rules_meta_as_a_role_with_nothing_to_reach(tmp_path, capsys):
    body = "game: {name: game, base_url: 'http://127.0.0.1:9/v1'}\nmeta: {kind: rules}\n"
    code, out = run_check(tmp_path, capsys, body, "--dry-run")
    assert code == 0 and "rules meta: no model and nothing to reach" in out.splitlines()[-1]
    assert out.splitlines()[-1].startswith("meta")
