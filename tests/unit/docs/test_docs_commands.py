"""The commands the documentation gives are real: every ``automem`` subcommand and flag, and
every ``make`` target, written in a code span or code block of README.md or docs/*.md exists in
the parser (``cli.build_parser``) or the Makefile, so a reader who copies one gets the command,
not "invalid choice". And README.md stays a front door: at most 200 lines, giving the two
commands CI and a new user start with."""

import argparse
import re
from pathlib import Path

import pytest

from automem_dagster.cli import build_parser
from automem_dagster.commands.budget_flags import RetiredFlag

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 200
CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)
AUTOMEM = re.compile(r"(?:^|[\s/(=])automem(?=[ \t]|$)((?:[ \t]+[^\s|;&#>)]+)*)")
MAKE = re.compile(r"(?:^|[\s(])make[ \t]+([a-z][a-z0-9-]*)\b(?!')")
SEGMENT_END = re.compile(r"[|;&#>)]")


def code_of(page: Path) -> list[str]:
    """The page's code: fenced blocks (with shell line continuations joined) and inline spans."""
    text = page.read_text()
    return [(block or span).replace("\\\n", " ") for block, span in CODE.findall(text)]


def automem_commands(page: Path) -> list[list[str]]:
    """Each ``automem ...`` command in the page's code, as its words up to a pipe, a redirection,
    ``;``, ``&&`` or a comment."""
    commands = []
    for code in code_of(page):
        for line in code.splitlines():
            for match in AUTOMEM.finditer(line):
                words = SEGMENT_END.split(match.group(1))[0].split()
                if words:                                  # a bare `automem` names the program
                    commands.append(words)
    return commands


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def problems_of(words: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """What in ``automem <words>`` the parser does not know: a subcommand, or a flag (exactly, no
    abbreviation; a retired flag, which the parser knows only to refuse, counts as unknown). Placeholders
    (``<game>``) and option values are not checked."""
    path, rest = ["automem"], list(words)
    while (choices := subparsers(parser)) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        if name not in choices:
            return [f"{' '.join(path)} has no subcommand {name!r}"]
        parser, path = choices[name], [*path, name]
    if subparsers(parser):
        return [f"{' '.join(path)} needs a subcommand"]
    known = {flag for action in parser._actions if not isinstance(action, RetiredFlag) for flag in action.option_strings}
    flags = [w.split("=", 1)[0] for w in rest if w.startswith("--")]
    return [f"{' '.join(path)} has no flag {flag}" for flag in flags if flag not in known]


def make_targets() -> set[str]:
    return set(re.findall(r"(?m)^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text()))


def test_the_readme_is_a_front_door_of_at_most_200_lines_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= MAX_README_LINES, f"README.md is {len(readme.splitlines())} lines: move reference to docs/"
    assert "make run" in readme and "make test" in readme   # .ci/run runs README's test command


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_automem_command_the_page_gives_exists(page):
    parser = build_parser()
    problems = [f"`automem {' '.join(words)}`: {problem}" for words in automem_commands(page)
                for problem in problems_of(words, parser)]
    assert not problems, f"{page.relative_to(ROOT)} names commands the CLI does not have:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_make_target_the_page_gives_exists(page):
    targets = make_targets()
    named = {t for code in code_of(page) for t in MAKE.findall(code)}
    assert named <= targets, f"{page.relative_to(ROOT)} names make targets the Makefile lacks: {sorted(named - targets)}"


def test_the_check_catches_a_wrong_subcommand_a_wrong_flag_and_a_missing_target():
    """The checks above would see the mistakes they exist for."""
    parser = build_parser()
    assert problems_of(["revise", "--game", "crafter", "--rollout-episodes", "2"], parser) == []
    assert problems_of(["endpoints", "check", "--endpoints", "x.yaml", "--dry-run"], parser) == []
    assert problems_of(["revize", "--game", "crafter"], parser) == ["automem has no subcommand 'revize'"]
    assert problems_of(["revise", "--epsiodes", "2"], parser) == ["automem revise has no flag --epsiodes"]
    assert problems_of(["revise", "--max-steps", "2"], parser) == ["automem revise has no flag --max-steps"]
    assert problems_of(["endpoints"], parser) == ["automem endpoints needs a subcommand"]
    assert "mlflow-ui" in make_targets() and "mlflow" not in make_targets()
