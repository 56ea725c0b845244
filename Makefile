# mlcluster: the two commands are `make synth` and `make test`.
# Both set up what they need: .venv (package + dev tools), node_modules (the
# pinned CDK CLI) and, for tests, .venv-pcluster (ParallelCluster's own schema,
# which pins CDK v1 and cannot share a venv with aws-cdk-lib v2).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PCLUSTER_VENV := .venv-pcluster
CHECKOV_VENV := .venv-checkov
CDK := node_modules/.bin/cdk
SOURCES := mlcluster tests tools app.py

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: setup synth test lint typecheck pytest snapshot-update bench clean config-docs cdk-context compliance

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# checkov pins boto3 and packaging below what mlcluster needs, so it lives in a venv of its own.
$(CHECKOV_VENV)/.installed: requirements-checkov.txt
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r requirements-checkov.txt
	touch $@

$(PCLUSTER_VENV)/.installed: requirements-pcluster.txt
	$(PYTHON) -m venv $(PCLUSTER_VENV)
	$(PCLUSTER_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PCLUSTER_VENV)/bin/python -m pip install --quiet -r requirements-pcluster.txt
	touch $@

setup: $(VENV)/.installed node_modules/.installed

## synth: every environment through the real `cdk synth` (ENV=dev,prod for a subset)
synth: setup
	$(PY) tools/synth_summary.py $(ENV)

lint: setup
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)

typecheck: setup
	$(VENV)/bin/mypy

# The tests write many small files (fake nodes, cloud assemblies, venvs): in memory when the
# machine has a tmpfs at /dev/shm with 2 GiB free (a run writes about 350 MB; pytest keeps the last
# three) that can run programs (the fake nodes' stub commands), which halves the kernel time of the
# lifecycle tests; elsewhere the usual TMPDIR. Set TEST_TMPDIR to choose.
ifeq ($(origin TEST_TMPDIR),undefined)
TEST_TMPDIR := $(shell [ "$$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $$4 }')" -ge 2097152 ] 2>/dev/null && \
	f=$$(mktemp -p /dev/shm mlcluster-exec-check.XXXXXX 2>/dev/null) && \
	printf '\043!/bin/sh\n' >"$$f" && chmod 700 "$$f" && "$$f" && rm -f "$$f" && echo /dev/shm; \
	rm -f "$$f" 2>/dev/null; true)
endif

# PYTHONDONTWRITEBYTECODE (set on some machines) would make every worker rewrite the asserts of
# every test module again on each run (4 s of CPU a worker here): pytest and Python keep their
# caches in the __pycache__ folders git ignores.
pytest: setup $(PCLUSTER_VENV)/.installed $(CHECKOV_VENV)/.installed
	PYTHONDONTWRITEBYTECODE= $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR) )$(VENV)/bin/pytest -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

## compliance: per environment and pack, every cdk-nag rule's status and checkov's in cdk.out/compliance/ (ENV=dev,prod for a subset)
compliance: setup $(CHECKOV_VENV)/.installed
	$(PY) tools/compliance_report.py $(ENV)

## test: lint, types, and the whole pytest suite (nag, cfn-lint, snapshots, CLI, wheel)
test: lint typecheck pytest

## snapshot-update: accept intended template/help changes in every test module that takes snapshots
snapshot-update: setup $(PCLUSTER_VENV)/.installed
	$(VENV)/bin/pytest -q --snapshot-update $$(grep -rl --include='test_*.py' SnapshotAssertion tests)

bench: setup $(PCLUSTER_VENV)/.installed
	$(PY) tools/bench.py

## config-docs: regenerate schema/environment.schema.json and the README's configuration reference
config-docs: setup
	$(PY) tools/gen_config_docs.py

## cdk-context: regenerate mlcluster/cdk_context.json (the feature flags the wheel ships) from cdk.json
cdk-context: setup
	$(PY) tools/cdk_context.py

clean:
	rm -rf cdk.out .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
