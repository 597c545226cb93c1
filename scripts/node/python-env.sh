#!/usr/bin/env bash
# Boot step: tells `gpufleet run` which Python virtualenv the image carries, in /etc/gpufleet/python.env, root's, 0644:
# one line GPUFLEET_PYTHON_VENV=/abs/path when the image has one (paths.python_venv of the versions manifest, which
# scripts/ami/17-validate.sh writes for a profile with a pytorch option: /opt/gpufleet/pytorch), an empty file when
# it has none. scripts/ops/start-run.sh reads it for every run unit it starts (joined runs too) and hands the
# virtualenv to the run's body, which puts its bin/ first on PATH (docs/guides/running-jobs.md, "The image's Python").
# An image without a versions manifest is not one gpufleet built (a Deep Learning AMI: deep-learning-ami.sh writes
# this same file from what it reads there): the file is left as it is. Reads the manifest with jq, which
# scripts/ami/01-build-tools.sh installs on every image.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

manifest=${GPUFLEET_ROOT:-}/etc/gpufleet/versions.json
env_file=${GPUFLEET_ROOT:-}/etc/gpufleet/python.env
if [[ ! -f $manifest ]]; then
  log "no versions manifest (not an image gpufleet built): python.env left as it is"
  exit 0
fi
if ! venv=$(jq -er '.paths.python_venv // "" | strings' "$manifest" 2>/dev/null) ||
  [[ -n $venv && ! ($venv =~ ^/[A-Za-z0-9._/-]+$ && /$venv/ != */../*) ]]; then
  die "$manifest: paths.python_venv is not an absolute path or null"
fi
file=$(mktemp "$env_file.XXXXXX")
if [[ -n $venv ]]; then echo "GPUFLEET_PYTHON_VENV=$venv" >"$file"; fi
chmod 0644 "$file"
mv -f "$file" "$env_file"
log "${venv:-no virtualenv on this image}: written to /etc/gpufleet/python.env"
