"""A default edited in the settings model (``loop/settings.py``) and nowhere else shows in ``automem train
--help``, the Dagster config schema and ``automem params``, in a fresh interpreter as a user runs them."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import automem_dagster

PACKAGE = Path(automem_dagster.__file__).parent

SHOW = """
import contextlib, io, json
from automem_dagster import cli
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from dagster._config.pythonic_config import infer_schema_from_config_class
help_text = io.StringIO()
with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
    cli.main(["train", "--help"])
params = io.StringIO()
with contextlib.redirect_stdout(params):
    cli.main(["params"])
field = infer_schema_from_config_class(ProficiencyConfig).config_type.fields["score_window"]
print(json.dumps({"help": " ".join(help_text.getvalue().split()), "params": params.getvalue(),
                  "dagster": field.default_value}))
"""


@pytest.mark.contract
def test_a_default_changed_in_the_model_shows_in_train_help_the_dagster_schema_and_params(tmp_path):
    """A copy of the package with the cheap score window's default edited in ``loop/settings.py`` (and nowhere
    else), run in a fresh interpreter as a user runs it."""
    copy = tmp_path / "automem_dagster"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    settings = copy / "loop" / "settings.py"
    source = settings.read_text()
    assert source.count("score_window: int = _option(10,") == 1
    settings.write_text(source.replace("score_window: int = _option(10,", "score_window: int = _option(37,"))
    out = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, cwd=tmp_path, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)})
    shown = json.loads(out.stdout.splitlines()[-1])
    assert "--score-window SCORE_WINDOW the cheap score's window" in shown["help"] and "(default 37)" in shown["help"]
    assert yaml.safe_load(shown["params"])["curate"]["score_window"] == 37
    assert shown["dagster"] == 37


