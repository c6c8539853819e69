# sickbay — every target sets up what it needs (venv, jars, Slurm packages) on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.DEFAULT_GOAL := help

help: ## Show the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP) ## Create .venv and install sickbay with its dev tools

dev-up: venv ## Start real Kafka (KRaft) and Slurm (slurmctld + 4 slurmd), create topics
	SICKBAY_PYTHON=$(PY) bash deploy/local/stack.sh up

dev-down: ## Stop the local stack
	SICKBAY_PYTHON=$(PY) bash deploy/local/stack.sh down

kafka-up: venv ## Start only the local Kafka broker (KRaft; jars cached); the broker benchmarks need no more
	bash deploy/local/kafka.sh up

kube-up: ## Start a real kube-apiserver + etcd (builds kube-apiserver once, cached in ~/.cache/sickbay/kube)
	bash deploy/local/kube.sh up

kube-down: ## Stop the local kube-apiserver + etcd
	bash deploy/local/kube.sh down

dev-status: ## Show the local stack
	SICKBAY_PYTHON=$(PY) bash deploy/local/stack.sh status

demo: venv ## One GPU fault end to end on real Kafka, Faust, Slurm and ClickHouse (chdb)
	$(VENV)/bin/sickbay demo

demo-k8s: venv ## The same fault on a real kube-apiserver: PyTorchJob restarted away from a cordoned node
	$(VENV)/bin/sickbay demo --scheduler kubernetes

test: venv ## Lint, type-check and run every test (starts the local stack when needed)
	bash deploy/local/test-tools.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy schemas streams connectors benchmarks
	SICKBAY_PYTHON=$(PY) $(VENV)/bin/pytest $(PYTEST_ARGS)

test-unit: venv ## Only the tests that need no running component
	$(VENV)/bin/pytest -m "not integration and not e2e" $(PYTEST_ARGS)

lint: venv ## ruff + mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check . || true
	$(VENV)/bin/mypy schemas streams connectors benchmarks

bench: venv ## Run the benchmarks, append to benchmarks/RESULTS.md
	$(PY) -m benchmarks.fault_to_drain

bench-extract: venv ## Extraction speed vs grep -E on a cached 1 GiB log corpus, append to benchmarks/RESULTS.md
	$(PY) -m benchmarks.bench_extract

clean: ## Remove the venv and local state (keeps the download cache)
	-bash deploy/local/stack.sh down
	rm -rf $(VENV) .cache/stack

.PHONY: help venv dev-up dev-down kafka-up kube-up kube-down dev-status demo demo-k8s test test-unit lint bench bench-extract clean

SCORE_ARGS ?=
score: venv ## Scoreboard: 1,000 seeded simulator scenarios through diagnose and the stream (RESULTS.md)
	$(PY) -m benchmarks.scoreboard $(SCORE_ARGS)

.PHONY: score

bench-sink: venv ## Sink throughput: realistic signals through the ClickHouse sink into chdb (RESULTS.md)
	$(PY) -m benchmarks.bench_sink

.PHONY: bench-sink

BENCH_ACT_ARGS ?=
bench-act: dev-up ## Incident -> action on real Slurm: act p50/p99 and reconciliation over 50 incidents + a storm (RESULTS.md)
	$(PY) -m benchmarks.bench_act $(BENCH_ACT_ARGS)

.PHONY: bench-act

bench-collect: kafka-up ## Collector throughput: files → real Kafka, side by side with bare confluent-kafka (RESULTS.md)
	$(PY) -m benchmarks.bench_collect

.PHONY: bench-collect

BENCH_STREAM_ARGS ?=
bench-stream: kafka-up ## One Faust worker end to end: events/s vs raw consume, latency at 10k/s, RSS (RESULTS.md)
	$(PY) -m benchmarks.bench_stream $(BENCH_STREAM_ARGS)

.PHONY: bench-stream

SCALE_ARGS ?=
bench-scale: venv ## Scale-out: 1 → 2 → 4 Faust workers on a 3-broker KRaft cluster (RF 3), RESULTS.md
	$(PY) -m benchmarks.bench_scale $(SCALE_ARGS)

wheels: venv ## The wheels the container image installs (sickbay[nvml] + dependencies) into dist/wheels
	$(PY) -m pip wheel --wheel-dir dist/wheels '.[nvml]'

helm: ## Build helm from its Go module once (cached in ~/.cache/sickbay/bin) and lint the chart
	"$$(bash deploy/local/tools.sh helm)" lint --strict deploy/helm/sickbay

.PHONY: bench-scale wheels helm
