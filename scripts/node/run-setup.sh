#!/usr/bin/env bash
# Runs the node setup scripts named in GPUFLEET_SETUP_SCRIPTS, in that order, from this script's directory.
# gpufleet-node-setup.service runs it at every boot. One failing script does not keep the others from
# running; the run fails if any of them failed.
set -euo pipefail

log() { echo "node-setup: $*"; }
die() { echo "node-setup: error: $*" >&2; exit 1; }

scripts=${GPUFLEET_SETUP_SCRIPTS?set GPUFLEET_SETUP_SCRIPTS to the setup scripts to run, e.g. "raid0-nvme gpu-clocks"}
script_dir=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")

failed=()
for name in $scripts; do
  [[ $name =~ ^[a-z0-9-]+$ && -x $script_dir/$name.sh ]] || die "no setup script $script_dir/$name.sh"
  log "running $name"
  "$script_dir/$name.sh" || failed+=("$name")
done
[[ ${#failed[@]} -eq 0 ]] || die "failed: ${failed[*]} (see the lines above)"
log "done: ${scripts:-nothing to run}"
