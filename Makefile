# `make demo` and `make test` set up everything they need on a fresh machine
# that has Python 3.11+ and make.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-fast soak test-hosts e2e lint format bench completions docs clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "foliko needs Python 3.11 or newer: set PYTHON=/path/to/python3.11")'
	$(PYTHON) -m venv $(VENV)

# Bytecode is compiled at install time: start-up stays fast (P1) even where
# PYTHONDONTWRITEBYTECODE keeps Python from caching it on first use.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	$(BIN)/python -m compileall -q foliko_cli
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m compileall -q foliko_cli
	@touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/foliko chat --session demo "hello"

# Tests run in parallel worker processes (pytest-xdist); the llama-server tier
# stays on one worker. TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 3

# pytest keeps the test modules it rewrote for its asserts (about 20 s of CPU a
# worker to redo) even where the environment sets PYTHONDONTWRITEBYTECODE.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest

# mypy reads its settings from pyproject.toml (strict on the whole package)
# and keeps its cache in .mypy_cache, so a second run takes seconds.
test: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup

# The edit loop: in-process tests only (no PostgreSQL/Redis, no foliko processes,
# no real servers).
test-fast: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	FOLIKO_TEST_SERVICES=0 $(PYTEST) -q -m "not slow" -n $(TEST_WORKERS)

# Minutes of random writers killed at random on every persistent backend.
soak: $(VENV)/.installed-dev
	FOLIKO_SOAK_SECONDS=150 FOLIKO_REQUIRE_SERVICES=1 $(BIN)/pytest -q -s tests/storage/test_soak.py

# Three foliko serve hosts in network namespaces on one PostgreSQL, then one
# Redis, under kill -9, cut links and database restarts (as root; see
# tests/hosts/harness.py). `make test` runs a small version of it.
HOSTS_TURNS ?= 1000
test-hosts: $(VENV)/.installed-dev
	cd tests && ../$(BIN)/python -m hosts.harness --backend both --turns $(HOSTS_TURNS) --report ../.hosts-report.json

# The real-server tier alone: the CLI against llama-server with a small model.
e2e: $(VENV)/.installed-dev
	$(BIN)/pytest -m e2e tests/e2e

format: $(VENV)/.installed-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The documentation site from docs/ into site/; strict: a broken link or anchor,
# or a page missing from mkdocs.yml's nav, fails it (make test builds it too).
docs: $(VENV)/.installed-dev
	$(BIN)/mkdocs build --strict

completions: $(VENV)/.installed
	$(BIN)/foliko completion bash > completions/foliko.bash
	$(BIN)/foliko completion zsh > completions/_foliko
	$(BIN)/foliko completion fish > completions/foliko.fish

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .ruff_cache .mypy_cache
