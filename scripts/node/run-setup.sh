#!/usr/bin/env bash
# Runs the node setup scripts named in GPUFLEET_SETUP_SCRIPTS, in that order, from this script's directory.
# gpufleet-node-setup.service runs it at every boot. One failing script does not keep the others from
# running; the run fails if any of them failed.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_SETUP_SCRIPTS
scripts=$GPUFLEET_SETUP_SCRIPTS
script_dir=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")

failed=()
for name in $scripts; do
  [[ $name =~ ^[a-z0-9-]+$ && -x $script_dir/$name.sh ]] || die "no setup script $script_dir/$name.sh"
  log "running $name"
  "$script_dir/$name.sh" || failed+=("$name")
done
[[ ${#failed[@]} -eq 0 ]] || die "failed: ${failed[*]} (see the lines above)"
log "done: $scripts"
