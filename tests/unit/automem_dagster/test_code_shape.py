"""The code's shape rules, kept by a test: no module of the package over 400 lines and no function
over 60 lines (decorators included), so a reader finds one concern per module and one step per
function. Tests are exempt. A failure names the module or function and its length."""

import argparse
import ast
from pathlib import Path

from automem_dagster.cli import build_parser

PACKAGE = Path(__file__).resolve().parents[3] / "automem_dagster"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {long}"


def test_no_function_is_over_60_lines():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                if (n := node.end_lineno - start + 1) > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (cut them into named steps): {long}"


def test_every_command_option_has_help():
    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.option_strings and action.help is None:
                missing.append(f"{path} {action.option_strings[0]}")

    walk(build_parser(), "automem")
    assert not missing, f"options without help: {missing}"
