"""One edit of a loop's config (``loop/settings.py``, the budget in ``options.py``) and nowhere else shows in the
CLI help of every command that takes that part, the Dagster config schema and ``automem params``, in a fresh
interpreter as a user runs them: a default changed, and an option added."""

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
import contextlib, io, json, sys
from automem_dagster import cli
from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from dagster._config.pythonic_config import infer_schema_from_config_class
part, name, commands = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
helps = {}
for command in commands:
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
        cli.main([command, "--help"])
    helps[command] = " ".join(text.getvalue().split())
params = io.StringIO()
with contextlib.redirect_stdout(params):
    cli.main(["params"])
schema = {}
for config_name, config in (("RoundConfig", RoundConfig), ("ProficiencyConfig", ProficiencyConfig)):
    fields = infer_schema_from_config_class(config).config_type.fields
    if part in fields and name in fields[part].config_type.fields:
        schema[config_name] = fields[part].config_type.fields[name].default_value
print(json.dumps({"help": helps, "params": params.getvalue(), "dagster": schema}))
"""


def show(tmp_path: Path, part: str, name: str, commands: tuple[str, ...]) -> dict:
    """What a user sees of option ``part.name`` in a fresh interpreter on the package copy in ``tmp_path``."""
    out = subprocess.run([sys.executable, "-c", SHOW, part, name, ",".join(commands)], capture_output=True, text=True,
                         cwd=tmp_path, check=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path),
                                                        "HOME": str(tmp_path)})
    return json.loads(out.stdout.splitlines()[-1])


def edited_copy(tmp_path: Path, module: str, old: str, new: str) -> None:
    """A copy of the package with ``old`` (found once) replaced by ``new`` in ``module``, and nothing else."""
    copy = tmp_path / "automem_dagster"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    source = (copy / module).read_text()
    assert source.count(old) == 1
    (copy / module).write_text(source.replace(old, new))


@pytest.mark.contract
def test_a_default_changed_in_the_config_shows_in_train_help_the_dagster_schema_and_params(tmp_path):
    edited_copy(tmp_path, "loop/settings.py", "score_window: int = option(10,", "score_window: int = option(37,")
    shown = show(tmp_path, "curation", "score_window", ("train",))
    assert "--score-window SCORE_WINDOW the cheap score's window" in shown["help"]["train"]
    assert "(default 37)" in shown["help"]["train"]
    assert yaml.safe_load(shown["params"])["curate"]["score_window"] == 37
    assert shown["dagster"] == {"ProficiencyConfig": 37}


ADDED = {
    "budget": ("options.py", "    max_attempts: int = option(3, \"meta-LLM attempts per diagnosis or revision\", "
               "\"--attempts\", ge=1)\n", "rollout", ("revise", "rounds", "train"), ("RoundConfig", "ProficiencyConfig")),
    "curation": ("loop/settings.py", "    replay: Replay = Replay()\n", "curate", ("train", "curate"),
                 ("ProficiencyConfig",)),
}
"""Where one line adds an option to a part: the module and the line it follows, the params.yaml section it
takes, the commands that take the whole part and the Dagster configs that have it."""


@pytest.mark.contract
@pytest.mark.parametrize("part", sorted(ADDED))
def test_an_option_added_to_a_part_in_one_line_shows_everywhere_that_part_does(tmp_path, part):
    module, after, section, commands, configs = ADDED[part]
    line = f'    probe_count: int = option(7, "a probe option added in one line", param="{section}.probe_count", ge=1)\n'
    edited_copy(tmp_path, module, after, after + line)
    shown = show(tmp_path, part, "probe_count", commands)
    for command in commands:
        assert "--probe-count PROBE_COUNT a probe option added in one line (default 7)" in shown["help"][command], command
    assert yaml.safe_load(shown["params"])[section]["probe_count"] == 7
    assert shown["dagster"] == dict.fromkeys(configs, 7)
