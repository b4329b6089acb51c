# The two commands of the README's Quick start:
#   make demo   set everything up (.venv/) and run the demo on the embedded log
#   make test   set everything up and run the whole test suite (lint, types, layers, tests)
# and two more:
#   make test-matrix   the suite on the other supported Pythons (3.12, 3.13) without extras
#   make dist          the wheel and the sdist in dist/

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup system interop oracle demo test test-matrix dist lint check bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $@

# System tools the interoperability tests use (kcat is librdkafka's command-line client).
system:
	bash scripts/install-system-deps.sh

# Kafka Streams, the oracle of streamkit's semantics and a peer in its benchmarks (Java, Maven).
interop:
	bash scripts/interop.sh

# The oracle's long run (not in `make test`): 10,000 cases per family, families one after another,
# their counts in a table: make oracle [FAMILIES="tumbling session"] [STREAMKIT_ORACLE_CASES=n]
oracle: setup interop
	bash scripts/oracle-long.sh $(FAMILIES)

demo: setup
	bash scripts/demo.sh

lint: setup
	$(BIN)/ruff check streamkit tests benchmarks apps scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

test: setup system interop lint
	$(BIN)/pytest -q -p no:cacheprovider

# One venv per Python (.venv-3.12, .venv-3.13) with `.[dev]` only: scripts/test-matrix.sh.
# MATRIX picks the versions, PYTEST_ARGS some tests (make test-matrix PYTEST_ARGS=tests/runtime/eos).
MATRIX ?= 3.12 3.13
test-matrix: system
	bash scripts/test-matrix.sh $(MATRIX)

dist: setup
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

bench: setup
	$(BIN)/python benchmarks/log_bench.py

clean:
	rm -rf $(VENV) .venv-3.* .mypy_cache .ruff_cache .pytest_cache build dist *.egg-info
