"""One settings model per loop (``loop/settings.py``): the only place a round option has its default and help.
The CLI's options, the Dagster run config and params.yaml all come from it, and the DVC stages read
params.yaml through ``--settings`` (a default edited in the model, seen everywhere in a fresh interpreter:
tests/contract/test_settings_default_everywhere.py)."""

import ast
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import yaml

import automem_dagster
from automem_dagster import cli
from automem_dagster.commands.shared import option_flag, proficiency_settings
from automem_dagster.loop.settings import ProficiencyOptions, options_of_params

PACKAGE = Path(automem_dagster.__file__).parent
REPO = PACKAGE.parent
"""The checkout (tests run with a scratch project home, so not ``paths.REPO``)."""
def test_params_yaml_is_what_automem_params_writes(tmp_path, capsys):
    """The committed params.yaml is the output of the command its header names: no value of its own."""
    committed = (REPO / "params.yaml").read_text()
    command = next(line.strip("# \n") for line in committed.splitlines() if line.startswith("#   automem params"))
    words = shlex.split(command)[1:]
    out = tmp_path / "params.yaml"
    words[words.index("--out") + 1] = str(out)
    assert cli.main(words) == 0
    assert out.read_text().replace(str(out), "params.yaml") == committed
    options_of_params(REPO / "params.yaml")  # and the model accepts it


def test_a_bad_params_file_is_refused_naming_the_key(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump({"curate": {"score_window": 0}, "gate": {"rule": "mostly"}}))
    with pytest.raises(ValueError, match=r"curate.score_window.*greater than or equal to 1") as raised:
        options_of_params(bad)
    assert str(bad) in str(raised.value)


def test_settings_file_values_replace_defaults_and_given_options_win(tmp_path):
    """What the DVC stages do (``automem curate ... --settings params.yaml``)."""
    settings = tmp_path / "params.yaml"
    settings.write_text(yaml.safe_dump({"curate": {"score_window": 4, "review_batches": 1, "min_examples": 3,
                                                   "accept_score": "", "keep_unmeasured": True}}))
    args = cli.build_parser().parse_args(["curate", "--game", "crafter", "--batch", "b", "--settings", str(settings),
                                          "--review-batches", "5"])
    curation = proficiency_settings(args).curation
    assert (curation.weights.horizon, curation.max_review_batches, curation.min_examples) == (4, 5, 3)
    assert curation.keep_unmeasured
    assert curation.accept_score == ProficiencyOptions().settings("crafter").curation.accept_score


ROUND_ONLY_FLAGS = sorted(option_flag(ProficiencyOptions, name) for name in ProficiencyOptions.model_fields
                          if name not in {"eval_episodes", "eval_max_steps", "concurrency", "lora_settings",
                                          "eval_every", "seed_block"})
"""Flags that mean a round option and nothing else. ``--eval-episodes``, ``--eval-max-steps`` and
``--concurrency`` also name the budget of ``headroom`` and ``facts``, which measure on their own 30 seeds;
``--lora-settings`` is a file."""


def literal_defaults_outside_the_model() -> list[str]:
    """Where a round option's default is written again: an ``add_argument`` of a round flag in a command,
    a field of the options re-declared in the Dagster config, a literal default in ``RoundSettings``, a
    ``getattr(args, <option>, <default>)`` fallback, a params substitution in dvc.yaml."""
    found = []
    for path in sorted((PACKAGE / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                first = node.args[0]
                flag = first.value if isinstance(first, ast.Constant) else None
                if node.func.attr == "add_argument" and flag in ROUND_ONLY_FLAGS:
                    found.append(f"{path.name}: add_argument({flag!r})")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and len(node.args) == 3 \
                    and getattr(node.args[2], "value", 0) is not None:
                name = getattr(node.args[1], "value", None)
                if name in ProficiencyOptions.model_fields or f"--{str(name).replace('_', '-')}" in ROUND_ONLY_FLAGS:
                    found.append(f"{path.name}: getattr(args, {name!r}, <default>)")
    for path in (PACKAGE / "defs" / "common" / "config.py", PACKAGE / "defs" / "proficiency" / "config.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") in ProficiencyOptions.model_fields:
                found.append(f"{path.name}: {node.target.id} declared again")
    settings = ast.parse((PACKAGE / "loop" / "settings.py").read_text())
    round_settings = next(n for n in settings.body if isinstance(n, ast.ClassDef) and n.name == "RoundSettings")
    found += [f"RoundSettings.{n.target.id} = {ast.unparse(n.value)}" for n in round_settings.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.value, ast.Constant) and n.value.value is not None]
    dvc = (REPO / "dvc.yaml").read_text()
    found += [f"dvc.yaml: ${{{key}" for key in ("gate.", "curate.", "finetune.") if "${" + key in dvc]
    return found


def test_no_round_default_is_written_outside_the_settings_model():
    assert literal_defaults_outside_the_model() == []


def test_the_check_finds_a_default_written_in_a_command(monkeypatch, tmp_path):
    """The check itself: a CLI option re-declared with its own default is what it must catch."""
    for folder in ("defs/common", "defs/proficiency", "loop"):
        shutil.copytree(PACKAGE / folder, tmp_path / "automem_dagster" / folder)
    commands = tmp_path / "automem_dagster" / "commands"
    commands.mkdir()
    (commands / "proficiency.py").write_text('p.add_argument("--score-window", type=int, default=50)\n'
                                             'getattr(args, "review_batches", 10)\n')
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "automem_dagster")
    assert literal_defaults_outside_the_model() == ["proficiency.py: add_argument('--score-window')",
                                                    "proficiency.py: getattr(args, 'review_batches', <default>)"]
