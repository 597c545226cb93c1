# Two entry points for a fresh machine: `make synth` (the main job) and `make test` (the test suite).
# Both set up what they need first: the virtualenv from requirements-lock.txt, the pinned CDK CLI from
# package-lock.json, and packer/shellcheck/bats from Debian's packages (installed when run as root).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(CURDIR)/node_modules/.bin:$(PATH)
# jsii warns on every start that Node 20 is past its end of life; Node 20 is the supported platform here.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
# Some images set PYTHONDONTWRITEBYTECODE=1: then every test worker and every Python subprocess (the CDK app, the
# console script, the handlers) compiles gpufleet, stacks and the tests again, and pytest rewrites every test module.
unexport PYTHONDONTWRITEBYTECODE
# mkdocs-material 9.8 prints a banner about its end of life (May 2027) on every mkdocs run unless this is set
# (material/templates/__init__.py).
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup synth test lint bench mutate clean box box-shell box-down

setup: $(VENV)/.installed node_modules/.installed
	@scripts/dev/ensure-system-tools.sh

$(VENV)/.installed: requirements-lock.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpufleet needs Python 3.11 or newer")'
	@$(PYTHON) -m venv $(VENV) || { echo "cannot create a virtualenv: install python3-venv (apt-get install python3-venv)" >&2; exit 1; }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-lock.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js 20 (apt-get install nodejs npm)" >&2; exit 1; }
	npm ci --no-fund --no-audit --loglevel=error
	@touch $@

# Main job: validate every environment, synthesize all of them with the pinned CDK CLI (cdk-nag runs as a
# policy-validation plugin during synthesis), cfn-lint every template, check that every call made from inside a VPC has
# a route (gpufleet reachability: fails on any that has none), then print one summary per environment.
# CDK_VALIDATION=false skips aws-cdk-lib's built-in CloudFormation validator, which only warns and would check the
# templates with cfn-lint's rules a few seconds before cfn-lint itself checks them and fails on an error (bench/
# synth_bench.py, MAKE_SYNTH_ENV). `cdk deploy` and `cdk synth` run by hand keep it.
synth: setup
	gpufleet validate
	rm -rf cdk.out
	CDK_VALIDATION=false cdk synth --quiet
	@echo "cdk-nag AwsSolutions: no unacknowledged findings (synthesis fails on any)"
	cfn-lint --config-file .cfnlintrc.yaml -- cdk.out/*.template.json
	@echo "cfn-lint: every template passes"
	gpufleet reachability cdk.out
	@gpufleet summary cdk.out

# The static checks bind: make test runs them first and fails on any finding.
test: lint
	pytest -n 2

# mypy keeps its cache in .mypy_cache (the [tool.mypy] settings in pyproject.toml): a re-run takes seconds.
# The docs site is built into a temporary directory: --strict fails on a broken link or anchor and on a page
# missing from nav (the validation settings in mkdocs.yml); nothing is left behind. Not --quiet: in mkdocs 1.6.1 it
# hides the warnings from the strict check too, and the build passes (https://github.com/mkdocs/mkdocs/issues/4126).
lint: setup
	ruff check .
	ruff format --check .
	mypy
	lint-imports --no-cache
	shellcheck scripts/*/*.sh scripts/ami/lib/*.sh tests/box/*.sh tests/box/image/*.sh tests/box/image/layer/*/*/*/*/fi_info tests/box/image/nccl-tests/all_reduce_perf tests/box/image/layer/*/*/*/*/amazon-cloudwatch-agent-ctl tests/box/image/layer/etc/profile.d/*.sh
	packer fmt -check -diff ami/packer
	site=$$(mktemp -d); trap 'rm -rf "$$site"' EXIT; mkdocs build --strict --site-dir "$$site"

bench: setup
	python bench/synth_bench.py

# Mutation testing with mutmut, on demand (slow; not part of make test). MODULES="gpufleet/validators/capacity.py ..." limits the
# run to those modules and their mirrored test files, TESTS="tests/..." names other tests; REPORT=1 only reprints the
# last results, SURVIVORS=1 reruns only the last survivors. Results stay in mutants/ (see bench/mutation.py).
mutate: setup
	python bench/mutation.py $(if $(TESTS),--tests "$(TESTS)") $(if $(REPORT),--report-only) $(if $(SURVIVORS),--survivors) $(MODULES)

# The cluster in a box by hand (docs/development/cluster-in-a-box.md): `make box` brings prod's cluster up on real
# systemd nodes and holds it until Ctrl-C or `make box-down` from another shell; `make box-shell NODE=1` is a root
# shell on node 1. Root only (namespaces, mounts, cgroups). BOX_DIR, BOX_NODES and BOX_SPOT change the defaults.
BOX_DIR ?= /tmp/gpufleet-box
box: setup
	python -m tests.box up --dir $(BOX_DIR) $(if $(BOX_NODES),--nodes $(BOX_NODES)) $(if $(BOX_SPOT),--spot $(BOX_SPOT))

box-shell:
	python -m tests.box shell --dir $(BOX_DIR) $(or $(NODE),0)

box-down:
	python -m tests.box down --dir $(BOX_DIR)

clean:
	rm -rf cdk.out .pytest_cache mutants site
