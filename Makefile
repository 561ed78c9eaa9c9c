# crewlet-operator — every target installs what it needs (virtualenv, packages, binaries).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_DIR ?= .run

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

.PHONY: venv
venv: $(STAMP) ## Create the virtualenv and install the package with its dev dependencies

.PHONY: bins
bins: ## Build or fetch the Kubernetes 1.37 binaries into ~/.cache/crewlet-operator (idempotent)
	bash hack/bins.sh

.PHONY: lint
lint: venv ## ruff and mypy (strict)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

.PHONY: unit
unit: venv ## Tests that need no API server
	$(BIN)/python -m pytest unit -q

.PHONY: e2e
e2e: venv bins ## Tests against a real local control plane
	$(BIN)/python -m pytest e2e -q

.PHONY: test
test: lint unit e2e ## Everything CI runs: lint, type-check, unit, e2e

.PHONY: run
run: venv bins ## Control plane + CRDs + the operator + a sample company (Ready); Ctrl-C stops it
	RUN_DIR=$(RUN_DIR) $(BIN)/python hack/demo.py

.PHONY: manifests
manifests: venv ## Regenerate the CRDs in manifests/crds from the pydantic models
	$(BIN)/python -m crewlet_operator.api manifests/crds

.PHONY: fmt
fmt: venv ## Format and fix what ruff can
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
