#!/usr/bin/env bash
# Runs the node setup scripts named in GPUFLEET_SETUP_SCRIPTS, in that order, from this script's directory.
# gpufleet-node-setup.service runs it at every boot. One failing script does not keep the others from
# running; the run fails if any of them failed. Each script gets the names of those that failed before it in
# GPUFLEET_FAILED_SETUP_STEPS: node-ready.sh, last but for join-runs.sh, marks the node not ready when there are any,
# and join-runs.sh joins no run. Before the first script, node-ready.sh --booting takes back the readiness a previous
# boot marked; before each script up to node-ready, it marks the step that starts ("booting: step 3/9 shared-storage"),
# which `gpufleet up` shows per node. A mark that fails is a warning: the step runs all the same.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_SETUP_SCRIPTS
scripts=$GPUFLEET_SETUP_SCRIPTS
script_dir=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")

for name in $scripts; do
  [[ $name =~ ^[a-z0-9-]+$ && -x $script_dir/$name.sh ]] || die "no setup script $script_dir/$name.sh"
done
marks=false
if [[ " $scripts " == *" node-ready "* ]]; then
  marks=true
  "$script_dir/node-ready.sh" --booting || warn "could not mark the node booting; its readiness tag may be stale"
fi
read -r -a names <<<"$scripts"
failed=""
for index in "${!names[@]}"; do
  name=${names[index]}
  # node-ready.sh sets the final mark itself; join-runs comes after the node is ready.
  if [[ $marks == true && " node-ready join-runs " != *" $name "* ]]; then
    "$script_dir/node-ready.sh" --booting "$((index + 1))/${#names[@]} $name" || warn "could not mark step $name"
  fi
  log "running $name"
  GPUFLEET_FAILED_SETUP_STEPS=$failed "$script_dir/$name.sh" || failed+="${failed:+ }$name"
done
[[ -z $failed ]] || die "failed: $failed (see the lines above)"
log "done: $scripts"
