# One command per job. `make help` lists them. Everything installs itself on first use.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-lock
LAKEHOUSE := $(BIN)/lakehouse
# uv installs the lock (pip, kept in the venv for users, did the same in 73 s from a warm
# cache; uv in 43 s from an empty one, 4 s from a warm one: docs/testing.md)
UV_VERSION := 0.13.10
BENCH ?=

.PHONY: help setup up down status airflow ingest transform test test-fast test-suite test-faults test-cluster bench docs notebooks clean lint lock lock-airflow

help: ## Show this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Python 3.11 is required (found %s): set PYTHON=/path/to/python3.11" % sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing Python packages from requirements.lock into $(VENV) with uv (first time: ~1 min, pyspark builds from source)"
	$(BIN)/python -m pip install --quiet --upgrade "pip==25.3" "uv==$(UV_VERSION)"
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	$(BIN)/uv pip check --quiet --python $(BIN)/python
	@# pyspark's own beeline script needs the venv activated to find its Spark home: this
	@# one opens beeline on the project's SQL endpoint from any shell (`lakehouse sql`)
	@printf '#!/bin/sh\n# beeline on the SQL endpoint: `lakehouse sql --help`\nexec "$$(dirname "$$0")/lakehouse" sql -- "$$@"\n' > $(BIN)/beeline
	@rm -f $(BIN)/beeline.cmd
	@sha256sum requirements.lock pyproject.toml > $(STAMP)

setup: $(STAMP) ## Create .venv from the lock, install Debian packages, binaries and jars
	@$(LAKEHOUSE) setup

up: setup ## Start the embedded stack (S3, Kafka broker, Kafka Connect, PostgreSQL)
	@$(LAKEHOUSE) up

down: ## Stop everything the project started
	@if [ -x $(LAKEHOUSE) ]; then $(LAKEHOUSE) down; else echo "nothing installed, nothing running"; fi

airflow: setup ## Start the stack with Airflow (UI on http://127.0.0.1:18280, login in .env)
	@$(LAKEHOUSE) up --airflow

status: setup ## Show each component's state, address, version and uptime
	@$(LAKEHOUSE) status

ingest: setup ## Run the main job: sources -> Kafka -> bronze/silver/gold Delta tables
	@$(LAKEHOUSE) ingest

transform: setup ## Build the dbt models over the lakehouse tables
	@$(LAKEHOUSE) transform

docs: setup ## Generate and serve the dbt docs site on loopback
	@$(LAKEHOUSE) docs

notebooks: setup ## Run the SQL notebooks headless; HTML under .state/notebooks
	@$(LAKEHOUSE) notebooks

# The cluster profile's tests run beside the suite, on a stack of their own (other ports and
# state folder), at a lower CPU priority (nice CLUSTER_TEST_NICE): the suite leaves about a
# third of the two cores idle (waits on servers, restarts, polls), which the cluster module
# fills, instead of 5-7 minutes after it (docs/testing.md has the figures). Their output
# goes to CLUSTER_TEST_LOG and is printed once the suite ends. Both always run; either
# failing fails `make test`; a Ctrl-C stops both (each pytest stops its own stack).
CLUSTER_TEST_NICE ?= 19
CLUSTER_TEST_LOG := .state/logs/test-cluster.log
test: setup ## Run every test against real servers (starts and stops its own stacks)
	@mkdir -p $(dir $(CLUSTER_TEST_LOG)); \
	echo "the cluster profile's tests run beside the suite (nice $(CLUSTER_TEST_NICE)); output: $(CLUSTER_TEST_LOG)"; \
	( trap - INT; exec nice -n $(CLUSTER_TEST_NICE) $(BIN)/python -m pytest -m cluster \
	  -p no:cacheprovider ) > $(CLUSTER_TEST_LOG) 2>&1 & cluster=$$!; \
	$(BIN)/python -m pytest -m "not cluster"; suite=$$?; \
	wait $$cluster; clustered=$$?; \
	echo "--- the cluster profile's tests (a stack of their own, beside the suite) ---"; \
	cat $(CLUSTER_TEST_LOG); \
	test $$suite -eq 0 && test $$clustered -eq 0

test-fast: setup ## Run the tests that need no server or Spark JVM (~1-2 min): the inner loop
	$(BIN)/python -m pytest -m "not stack and not cluster and not faults" -p no:cacheprovider

test-suite: setup ## Run every test but the cluster profile's (one stack, one process)
	$(BIN)/python -m pytest -m "not cluster"

test-faults: setup ## Run only the fault matrix (kill -9 each server during an ingest)
	$(BIN)/python -m pytest -m faults -s

test-cluster: setup ## Run only the cluster profile's tests (Spark standalone, 3 brokers)
	$(BIN)/python -m pytest -m cluster

bench: setup ## Run benchmarks (BENCH=stack for one); JSON results under .state/test/bench
	$(BIN)/python -m benchmarks $(BENCH)

lint: setup ## ruff and the layering contract (.importlinter) over the project
	$(BIN)/ruff check .
	$(BIN)/lint-imports

clean: ## Stop the stack and delete .state (keeps .venv; rm -rf .venv for a full reset)
	@if [ -x $(LAKEHOUSE) ]; then $(LAKEHOUSE) clean --yes; else rm -rf .state; fi

lock: ## Re-resolve requirements.in into requirements.lock (needs network to PyPI)
	rm -rf .state/lock-venv && $(PYTHON) -m venv .state/lock-venv
	.state/lock-venv/bin/pip install --quiet -r requirements.in
	{ head -2 requirements.lock; .state/lock-venv/bin/pip freeze; } > requirements.lock.new && mv requirements.lock.new requirements.lock

lock-airflow: ## Re-resolve orchestration/requirements-airflow.in into its lock (PyPI)
	rm -rf .state/lock-airflow-venv && $(PYTHON) -m venv .state/lock-airflow-venv
	.state/lock-airflow-venv/bin/pip install --quiet -r orchestration/requirements-airflow.in
	{ head -2 orchestration/requirements-airflow.lock; .state/lock-airflow-venv/bin/pip freeze; } > orchestration/requirements-airflow.lock.new && mv orchestration/requirements-airflow.lock.new orchestration/requirements-airflow.lock
