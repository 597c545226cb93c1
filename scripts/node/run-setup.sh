#!/usr/bin/env bash
# Runs the node setup scripts named in GPUFLEET_SETUP_SCRIPTS, in that order, from this script's directory.
# gpufleet-node-setup.service runs it at every boot. One failing script does not keep the others from
# running; the run fails if any of them failed. Each script gets the names of those that failed before it in
# GPUFLEET_FAILED_SETUP_STEPS: node-ready.sh, last but for join-runs.sh, marks the node not ready when there are any,
# and join-runs.sh joins no run. Before the first script, node-ready.sh --booting takes back the readiness a previous
# boot marked.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_SETUP_SCRIPTS
scripts=$GPUFLEET_SETUP_SCRIPTS
script_dir=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")

for name in $scripts; do
  [[ $name =~ ^[a-z0-9-]+$ && -x $script_dir/$name.sh ]] || die "no setup script $script_dir/$name.sh"
done
if [[ " $scripts " == *" node-ready "* ]]; then
  "$script_dir/node-ready.sh" --booting || warn "could not mark the node booting; its readiness tag may be stale"
fi
failed=""
for name in $scripts; do
  log "running $name"
  GPUFLEET_FAILED_SETUP_STEPS=$failed "$script_dir/$name.sh" || failed+="${failed:+ }$name"
done
[[ -z $failed ]] || die "failed: $failed (see the lines above)"
log "done: $scripts"
