# mlcluster: the two commands are `make synth` and `make test`.
# Both set up what they need: .venv (package + dev tools), node_modules (the
# pinned CDK CLI) and, for tests, .venv-pcluster (ParallelCluster's own schema,
# which pins CDK v1 and cannot share a venv with aws-cdk-lib v2) and .venv-checkov.
# Every venv installs exactly its lock in requirements/ (hashes required); `make lock`
# refreshes the locks, `make test-latest` runs the suite against the newest releases.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PCLUSTER_VENV := .venv-pcluster
CHECKOV_VENV := .venv-checkov
LOCK_VENV := .venv-lock
CDK := node_modules/.bin/cdk
SOURCES := mlcluster tests tools app.py

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true
# Material for MkDocs prints a notice about MkDocs 2 on every build.
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup synth test lint typecheck pytest snapshot-update bench mutation clean config-docs docs cdk-context compliance lock test-latest system-deps

# DEPS=latest (set by `make test-latest` in its own copy of the tree) installs the newest releases the
# ranges in pyproject.toml and requirements/*.in allow instead of the locks.
DEPS ?= locked
export MLCLUSTER_DEPS := $(DEPS)

# A venv from its lock: a new venv, then exactly the lock's files. --require-hashes checks every file
# against the lock's digests and refuses any requirement, dependencies included, that the lock does
# not pin. Not --no-deps: pip then installs in file order instead of dependencies first, and
# aws-cdk.cloud-assembly-schema overwrites the aws_cdk/cloud_assembly_schema/__init__.py that
# aws-cdk-lib ships too (tests/test_locks.py checks whose file is there). pip and setuptools are in
# the locks too. $(1): the venv, $(2): the lock's name in requirements/.
ifeq ($(DEPS),latest)
install_venv = rm -rf $(1) && $(PYTHON) -m venv $(1) && \
	$(1)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -r requirements/$(2).in
else
install_venv = rm -rf $(1) && $(PYTHON) -m venv $(1) && \
	$(1)/bin/python -m pip install --quiet --require-hashes -r requirements/$(2).txt
endif

# The project itself, editable, on top of its lock (its requirements are in the lock; setuptools,
# the build backend, too: no build isolation, so nothing unlocked is fetched to build it).
ifeq ($(DEPS),latest)
$(VENV)/.installed: pyproject.toml requirements/main.in
	$(call install_venv,$(VENV),main)
	$(PY) -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[dev]'
	touch $@
else
$(VENV)/.installed: pyproject.toml requirements/main.txt
	$(call install_venv,$(VENV),main)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@
endif

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# checkov pins boto3 and packaging below what mlcluster needs, so it lives in a venv of its own.
$(CHECKOV_VENV)/.installed: requirements/checkov.$(if $(filter latest,$(DEPS)),in,txt)
	$(call install_venv,$(CHECKOV_VENV),checkov)
	touch $@

$(PCLUSTER_VENV)/.installed: requirements/pcluster.$(if $(filter latest,$(DEPS)),in,txt)
	$(call install_venv,$(PCLUSTER_VENV),pcluster)
	touch $@

$(LOCK_VENV)/.installed: requirements/lock.txt
	$(call install_venv,$(LOCK_VENV),lock)
	touch $@

setup: $(VENV)/.installed node_modules/.installed

## system-deps: the Debian packages the tests run for real (Slurm, munge, MariaDB, promtool, amtool); installs what is missing (root, apt-get), a no-op otherwise
system-deps:
	bash tools/system_deps.sh tests/system-packages.txt

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
pytest: setup system-deps $(PCLUSTER_VENV)/.installed $(CHECKOV_VENV)/.installed
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

## mutation: mutation testing (not part of make test; minutes per module): mutmut over the modules that guard data, access and AWS calls, each against its own tests, and the hand-written node-script mutants (mutation/shell_mutants.yaml); prints the kill rate per module and writes mutation/results.json. MODULE=lockfile (or replacement, analysis, handlers, config-files, cli, constructs-security, shell) runs one; MINUTES=N stops a module after N minutes (default 60); KEEP=1 keeps the copy to read survivors (mutmut show NAME there); SAMPLE=N runs a seeded random sample of N mutants a module (SEED=S, default 1) and prints the kill rate with its 95% interval
mutation: setup
	PYTHONDONTWRITEBYTECODE= $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR) )$(PY) tools/mutation.py $(if $(MODULE),--module $(MODULE)) $(if $(MINUTES),--minutes $(MINUTES)) $(if $(filter 1 yes true,$(KEEP)),--keep) $(if $(SAMPLE),--sample $(SAMPLE)) $(if $(SEED),--seed $(SEED))

## config-docs: regenerate schema/environment.schema.json and the environment file reference (docs/reference/environment-file.md)
config-docs: setup
	$(PY) tools/gen_config_docs.py

## docs: the documentation site in site/ (mkdocs build --strict): regenerates the references, draws every example from a fresh synth, then opens the site in headless Chromium (screenshots in site/screenshots/)
docs: setup system-deps
	$(PY) tools/gen_config_docs.py
	$(PY) tools/gen_cli_docs.py
	$(PY) tools/environment_pictures.py --synth cdk.out/docs-synth docs
	$(VENV)/bin/mkdocs build --strict --site-dir site
	$(PY) tools/check_site.py site site/screenshots

## cdk-context: regenerate mlcluster/cdk_context.json (the feature flags the wheel ships) from cdk.json
cdk-context: setup
	$(PY) tools/cdk_context.py

UV_COMPILE := $(LOCK_VENV)/bin/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes \
	--custom-compile-command 'make lock' $(if $(PACKAGE),--upgrade-package $(PACKAGE),--upgrade)

## lock: re-resolve every lock in requirements/ to the newest releases the ranges allow (PACKAGE=name: that one only), then regenerate what is made from the locked data
lock: $(LOCK_VENV)/.installed
	$(UV_COMPILE) pyproject.toml requirements/main.in --extra dev -o requirements/main.txt
	$(UV_COMPILE) requirements/pcluster.in -o requirements/pcluster.txt
	$(UV_COMPILE) requirements/checkov.in -o requirements/checkov.txt
	$(UV_COMPILE) requirements/lock.in -o requirements/lock.txt
	$(MAKE) config-docs

## test-latest: the whole `make test` in a copy of this tree with the newest releases instead of the locks (not in CI)
# (`make`, not $(MAKE): `make -n test-latest` must not run the copy's make in a folder it did not create)
LATEST_DIR ?= $(or $(TMPDIR),/tmp)/mlcluster-test-latest
test-latest:
	rm -rf $(LATEST_DIR) && mkdir -p $(LATEST_DIR)
	git ls-files -z --cached --others --exclude-standard \
		| tar --null --ignore-failed-read -T - -cf - | tar -xf - -C $(LATEST_DIR)
	cd $(LATEST_DIR) && make DEPS=latest test; status=$$?; \
		$(LATEST_DIR)/.venv/bin/python tools/lock_check.py requirements/main.txt $(LATEST_DIR)/.venv || true; \
		exit $$status

clean:
	rm -rf cdk.out site .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
