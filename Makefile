# dspy-imp developer entry points. Everything runs from ./.venv; nothing needs activating.
#
#   make demo          examples/quickstart.py with a scripted model (offline)
#   make demo LIVE=1   the same against DSPY_IMP_MODEL (needs the provider's API key)
#   make test          ruff + mypy + docs build + pytest (network blocked: scripted models, replay, a local fake server)
#   make docs          the documentation site (mkdocs --strict) into site/

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(VENV)/bin
# python3.11 when present, else python3 (which must be >= 3.11, see pyproject.toml).
PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
PIP := $(BIN)/python -m pip --disable-pip-version-check --quiet
LIVE ?=
DEMO_FLAGS := $(if $(filter 1 yes true,$(LIVE)),--live,)

.PHONY: help demo test lint typecheck docs unit clean

help:
	@sed -n '3,6s/^#   //p' Makefile

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

demo: $(VENV)/.installed
	$(BIN)/python examples/quickstart.py $(DEMO_FLAGS)

test: lint typecheck docs unit

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check dspy_imp tests examples benchmarks docs/generate

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

unit: $(VENV)/.installed-dev
	$(BIN)/pytest --cov --cov-report=term

clean:
	rm -rf .pytest_cache .ruff_cache .mypy_cache build dist site *.egg-info
