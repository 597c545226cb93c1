#!/usr/bin/env bash
# Stops a run of `gpufleet run` on this node: `gpufleet stop ENV RUNID` sends every running node the one line
# (gpufleet/ops/runs.py stop_script)
#   . /etc/gpufleet/node.env && /opt/gpufleet/ops/stop-run.sh RUNID
# through Run Command (AWS-RunShellScript, as root). With shared storage it first marks the run's folder
# GPUFLEET_SHARED_DIR/gpufleet-runs/RUNID `stopped`, so that no node joins the run later (join-runs.sh); the folder is
# the cluster user's, so the mark is made by a process of the user's (helpers.sh as_cluster_user), and only where the
# folder is there (a run without a description gets none). Then it stops the unit gpufleet-run-RUNID where it is
# active (systemd sends SIGTERM to every process of the unit, SIGKILL after its stop timeout) and removes the unit's
# script, /run/gpufleet/runs/RUNID.sh (start-run.sh).
# Prints one line first: "stop-run: run RUNID: stopped" or "stop-run: run RUNID: not running"; a mark it could not
# make is a warning on stderr. Exit status: 0; 1 for an argument that is not a run id; systemctl's own when it could
# not stop the unit.
# An operator script: every node has it as /opt/gpufleet/ops/stop-run.sh (scripts/node/operator-scripts.sh installs it
# at boot).
# Optional: GPUFLEET_SHARED_DIR (empty: no shared storage), GPUFLEET_ROOT (tests).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_CLUSTER_USER
# The cluster user's shell: $1 the run's folder.
# shellcheck disable=SC2016 # expanded by the user's shell
readonly MARK_STOPPED='if [ -d "$1" ] && [ ! -L "$1" ]; then touch "$1/stopped"; fi'

[[ $# -eq 1 && $1 =~ $RUN_ID_PATTERN ]] || die "usage: stop-run.sh RUNID (such as 20261126-210500-3fa2)"
run_id=$1
unit=gpufleet-run-$run_id
marked=0
if [[ -n ${GPUFLEET_SHARED_DIR:-} ]]; then
  as_cluster_user 30 sh -c "$MARK_STOPPED" sh "$GPUFLEET_SHARED_DIR/gpufleet-runs/$run_id" </dev/null >/dev/null ||
    marked=$?
fi
if systemctl is-active --quiet "$unit"; then
  systemctl stop "$unit"
  log "run $run_id: stopped"
else
  log "run $run_id: not running"
fi
rm -f "${GPUFLEET_ROOT:-}/run/gpufleet/runs/$run_id.sh"
((marked == 0)) || warn "run $run_id: could not mark it stopped as $GPUFLEET_CLUSTER_USER" \
  "(${CLUSTER_USER_ERROR:-no message}): a node that becomes ready may still join it"
