"""``automem endpoints check`` against servers: it names why a role is unusable (a wrong port, an unknown
model) and passes a good one."""


import pytest
from endpoints_command import run_check

from automem_dagster.llm.process import free_port


@pytest.mark.contract
def test_check_names_a_wrong_port(tmp_path, capsys):
    code, out = run_check(tmp_path, capsys, f"game: {{name: game, base_url: 'http://127.0.0.1:{free_port()}/v1'}}\n")
    assert code == 1 and "UNUSABLE" in out and "not reachable" in out and "check that the server is running" in out


def test_check_names_an_unknown_model_and_passes_a_good_role(tmp_path, capsys, scripted):
    server = scripted([{"match": "", "reply": '{"action": "north"}'}],
                      {"models": ["served-model"], "strict_schemas": True})
    good = f"{{name: game, base_url: '{server.base_url}', model: served-model, constrained: json_schema}}"
    bad = f"{{name: meta, base_url: '{server.base_url}', model: typo-model, constrained: json_schema}}"
    code, out = run_check(tmp_path, capsys, f"game: {good}\nmeta: {bad}\n")
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert code == 1
    assert "ok" in lines["game"] and "mode honoured" in lines["game"]
    assert "UNUSABLE" in lines["meta"] and "typo-model` does not exist" in lines["meta"]
