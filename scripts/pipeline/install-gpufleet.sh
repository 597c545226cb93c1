#!/usr/bin/env bash
# Installs gpufleet from this source tree, with the dependencies pinned in requirements-lock.txt, into a virtualenv
# that the later build steps run it from.
# Settings: GPUFLEET_VENV (the virtualenv; default .venv in the source tree; an existing one is reused).
set -euo pipefail

cd "$(dirname "$0")/../.."
venv="${GPUFLEET_VENV:-.venv}"
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-lock.txt
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps .
"$venv/bin/gpufleet" --help >/dev/null
