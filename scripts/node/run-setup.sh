#!/usr/bin/env bash
# Runs the node setup scripts named in GPUFLEET_SETUP_SCRIPTS, in that order, from this script's directory.
# gpufleet-node-setup.service runs it at every boot. One failing script does not keep the others from
# running; the run fails if any of them failed. Each script gets the names of those that failed before it in
# GPUFLEET_FAILED_SETUP_STEPS: node-ready.sh, last but for join-runs.sh, marks the node not ready when there are any,
# and join-runs.sh joins no run. Before the first script, node-ready.sh --booting takes back the readiness a previous
# boot marked; before each script up to node-ready, it marks the step that starts ("booting: step 3/9 shared-storage"),
# which `gpufleet up` shows per node. A mark that fails is a warning: the step runs all the same.
# A step's script is NAME.sh beside this one, or, for a step after operator-scripts that the user data did not install
# (gpufleet/user_data.py ARCHIVED_SETUP_STEPS), NAME.sh in the operator scripts' folder that step filled.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_SETUP_SCRIPTS
scripts=$GPUFLEET_SETUP_SCRIPTS
script_dir=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
readonly OPS_DIR=${GPUFLEET_ROOT:-}/opt/gpufleet/ops

after_operator_scripts=false
for name in $scripts; do
  [[ $name =~ ^[a-z0-9-]+$ ]] || die "no setup script $script_dir/$name.sh"
  [[ -x $script_dir/$name.sh || $after_operator_scripts == true ]] || die "no setup script $script_dir/$name.sh"
  [[ $name != operator-scripts ]] || after_operator_scripts=true
done
marks=false
if [[ " $scripts " == *" node-ready "* ]]; then
  marks=true
  "$script_dir/node-ready.sh" --booting || warn "could not mark the node booting; its readiness tag may be stale"
fi
read -r -a names <<<"$scripts"
# A step's mark is set while the step runs (an AWS CLI call takes about a second), one at a time: a step that starts
# while the previous mark is still being set goes unmarked, so quick steps cost no calls and the marks land in order.
# node-ready, which sets the final mark itself, waits for the one in flight, so "ready" lands last.
mark_pid=""
wait_for_mark() {
  [[ -n $mark_pid ]] || return 0
  wait "$mark_pid" || warn "could not mark the step before $1"
  mark_pid=""
}
failed=""
for index in "${!names[@]}"; do
  name=${names[index]}
  # node-ready.sh sets the final mark itself; join-runs comes after the node is ready.
  if [[ $marks != true || " node-ready join-runs " == *" $name "* ]]; then
    wait_for_mark "$name"
  elif [[ -z $mark_pid ]] || ! kill -0 "$mark_pid" 2>/dev/null; then
    wait_for_mark "$name"
    "$script_dir/node-ready.sh" --booting "$((index + 1))/${#names[@]} $name" &
    mark_pid=$!
  fi
  log "running $name"
  script=$script_dir/$name.sh
  [[ -x $script ]] || script=$OPS_DIR/$name.sh
  if [[ ! -x $script ]]; then
    error "no setup script $script_dir/$name.sh or $script"
    failed+="${failed:+ }$name"
    continue
  fi
  GPUFLEET_FAILED_SETUP_STEPS=$failed "$script" || failed+="${failed:+ }$name"
done
wait_for_mark "the end"
[[ -z $failed ]] || die "failed: $failed (see the lines above)"
log "done: $scripts"
