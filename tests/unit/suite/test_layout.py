"""Tests mirror the package (issue 46): every test file sits in its tier's folder, ``tests/unit/<package>/``,
``tests/contract/`` or ``tests/e2e/``, so a module's unit tests are found next to its name and the folder
says what a test needs running (``folder_tier`` in tests/conftest.py fails a test in another tier's folder).
Only shared helpers and fixtures (``builders.py``, ``conftest.py``, ...) live directly in ``tests/``."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]

ROOT_TEST_FILES_BEING_MOVED = frozenset({
    # i43p's (Dagster assets from the plan):
    "test_dagster_defs.py", "test_dvc_yaml.py",
})
"""Test files still directly in ``tests/`` while the changes that own them move them into tier folders.
This list must only shrink, to empty, and then go with its check: a file moved out is taken off it (the
second test fails until it is), and no file is ever added."""


def loose_test_files() -> set[str]:
    return {path.name for path in TESTS.glob("test_*.py")}


def test_no_test_file_sits_directly_in_tests():
    stray = sorted(loose_test_files() - ROOT_TEST_FILES_BEING_MOVED)
    assert not stray, (f"{stray} sit directly in tests/: put each test in its tier's folder, tests/unit/<package>/"
                       "test_<module>.py (named after the module it tests), tests/contract/ or tests/e2e/ (by "
                       "capability); helpers used by several files go in a helper module in tests/")


def test_the_list_of_files_being_moved_names_only_files_still_there():
    moved = sorted(ROOT_TEST_FILES_BEING_MOVED - loose_test_files())
    assert not moved, f"{moved} left tests/: take them off ROOT_TEST_FILES_BEING_MOVED in {Path(__file__).name}"
