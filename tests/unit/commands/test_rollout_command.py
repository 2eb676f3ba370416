"""``automem rollout`` refuses bad input by name."""

import pytest

from automem_dagster.cli import main as cli_main


def test_bad_cli_input_is_reported(capsys):
    assert cli_main(["rollout", "--game", "chess", "--episodes", "1"]) == 2
    assert "chess" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["rollout", "--game", "crafter", "--seeds", "4x"])
