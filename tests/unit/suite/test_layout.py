"""Tests mirror the package (issue 46): every test file sits in its tier's folder, ``tests/unit/<package>/``,
``tests/contract/`` or ``tests/e2e/``, so a module's unit tests are found next to its name and the folder
says what a test needs running (``folder_tier`` in tests/conftest.py fails a test in another tier's folder).
Only shared helpers and fixtures (``builders.py``, ``conftest.py``, ...) live directly in ``tests/``."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_no_test_file_sits_directly_in_tests():
    stray = sorted(path.name for path in TESTS.glob("test_*.py"))
    assert not stray, (f"{stray} sit directly in tests/: put each test in its tier's folder, tests/unit/<package>/"
                       "test_<module>.py (named after the module it tests), tests/contract/ or tests/e2e/ (by "
                       "capability); helpers used by several files go in a helper module in tests/")

