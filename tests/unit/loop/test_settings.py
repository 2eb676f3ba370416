"""One config per loop (``loop/settings.py``): the only place a round option has its default and help, and
the only place a budget's default is written. The CLI's options, the Dagster run config and params.yaml all
come from it, and the DVC stages read params.yaml through ``--settings`` (a default edited in the config, or a
field added to it, seen everywhere in a fresh interpreter: tests/contract/test_settings_default_everywhere.py)."""

import ast
import shlex
from pathlib import Path

import pytest
import yaml

import automem_dagster
from automem_dagster import cli
from automem_dagster.commands.shared import proficiency_settings
from automem_dagster.loop.params_file import options_of_params
from automem_dagster.loop.settings import ProficiencyConfig, RoundsPlan
from automem_dagster.options import Budget, leaves

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
    curation = proficiency_settings(args).curation_settings()
    assert (curation.weights.horizon, curation.max_review_batches, curation.min_examples) == (4, 5, 3)
    assert curation.keep_unmeasured
    assert curation.accept_score == ProficiencyConfig().for_game("crafter").curation_settings().accept_score


BUDGET_NAMES = frozenset({*Budget.model_fields, *RoundsPlan.model_fields})
"""The budgets whose one default lives in the loops' config: rollouts, evaluation, concurrency, meta-LLM
attempts, rounds back to back."""
BUDGET_FLAGS = frozenset(leaf.flag for config in (Budget, RoundsPlan) for leaf in leaves(config).values())
CONFIG_MODULES = ("options.py", "loop/settings.py")
"""Where a budget's default may be written: the config and its named configs (``DEMO``, ``MEASURE``)."""
NOT_BUDGETS = {"commands/worker.py:--concurrency": "a Celery worker's processes, not episodes played at once"}
"""Flags that share a budget's name and mean something else, with what they mean."""


def _number(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _budget(name) -> bool:
    return isinstance(name, str) and name.lower() in BUDGET_NAMES


def literal_budget_defaults(package: Path = PACKAGE) -> list[str]:
    """Every number written for a budget outside the config modules: a parameter's default, a field's or a
    constant's value, a keyword argument (``concurrency=2``), an ``add_argument`` default of a budget flag, a
    ``getattr(args, <budget>, <number>)`` fallback; and params substitutions of the round's settings in dvc.yaml."""
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        if where in CONFIG_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arguments):
                params = [*node.posonlyargs, *node.args][-len(node.defaults):] if node.defaults else []
                pairs = [*zip(params, node.defaults, strict=True),
                         *((a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None)]
                found += [f"{where}:{d.lineno}: parameter {a.arg} = {d.value}" for a, d in pairs
                          if _budget(a.arg) and _number(d)]
            elif isinstance(node, ast.AnnAssign | ast.Assign) and _number(node.value):
                targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
                found += [f"{where}:{node.lineno}: {t.id} = {node.value.value}" for t in targets
                          if isinstance(t, ast.Name) and _budget(t.id)]
            elif isinstance(node, ast.Call):
                found += [f"{where}:{kw.lineno}: {kw.arg}={kw.value.value}" for kw in node.keywords
                          if _budget(kw.arg) and _number(kw.value)]
                first = node.args[0] if node.args else None
                if getattr(node.func, "attr", "") == "add_argument" and getattr(first, "value", None) in BUDGET_FLAGS \
                        and f"{where}:{first.value}" not in NOT_BUDGETS:
                    found += [f"{where}:{node.lineno}: add_argument({first.value!r}, default={kw.value.value})"
                              for kw in node.keywords if kw.arg == "default" and _number(kw.value)]
                if getattr(node.func, "id", "") == "getattr" and len(node.args) == 3 and _number(node.args[2]) \
                        and _budget(getattr(node.args[1], "value", None)):
                    found.append(f"{where}:{node.lineno}: getattr(args, {node.args[1].value!r}, {node.args[2].value})")
    found.sort(key=lambda line: (line.split(":")[0], int(line.split(":")[1])))  # by file and line, not walk order
    dvc = (REPO / "dvc.yaml").read_text()
    found += [f"dvc.yaml: ${{{key}" for key in ("gate.", "curate.", "finetune.") if "${" + key in dvc]
    return found


def test_no_budget_default_is_written_outside_the_config():
    assert literal_budget_defaults() == []


def test_the_check_finds_budget_defaults_written_anywhere(tmp_path):
    """The check itself, on a package with a budget written in each form it must catch."""
    (tmp_path / "commands").mkdir()
    (tmp_path / "commands" / "headroom.py").write_text(
        'p.add_argument("--concurrency", type=int, default=2)\n'
        'def measure(game, eval_episodes: int = 30, *, max_rounds=5): ...\n'
        'getattr(args, "patience", 2)\n')
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "rounds.py").write_text(
        'class Plan:\n    max_rounds: int = 5\nMAX_ATTEMPTS = 3\nBudget(rollout_max_steps=10, seed=4)\n')
    (tmp_path / "loop" / "settings.py").write_text("concurrency = 2\n")  # a config module: its own defaults
    assert literal_budget_defaults(tmp_path) == [
        "commands/headroom.py:1: add_argument('--concurrency', default=2)",
        "commands/headroom.py:2: parameter eval_episodes = 30",
        "commands/headroom.py:2: parameter max_rounds = 5",
        "commands/headroom.py:3: getattr(args, 'patience', 2)",
        "loop/rounds.py:2: max_rounds = 5",
        "loop/rounds.py:3: MAX_ATTEMPTS = 3",
        "loop/rounds.py:4: rollout_max_steps=10",
    ]
