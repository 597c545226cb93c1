#!/usr/bin/env bash
# Joins this node to the torchrun runs under way on the cluster: a replacement for a lost spot node, or any node that
# becomes ready after a run started, takes part in it without anyone starting it by hand. The setup step after
# node-ready (gpufleet/user_data.py setup_scripts), on nodes with shared storage only.
# `gpufleet run --torchrun` writes each run's description to GPUFLEET_SHARED_DIR/gpufleet-runs/RUNID/run.json
# (gpufleet/ops/runs.py run_description: JSON, the cluster user's file); `gpufleet stop` adds a file `stopped` beside
# it, the head's unit a file `ended` when its torchrun ends. This step starts every described run that is neither,
# is not already running here, and whose head still answers on its rendezvous port, as the same unit gpufleet run
# starts (gpufleet-run-RUNID, as the cluster user, with the run's environment): the others' torchrun line, whose
# elastic rendezvous takes the node in at its next round (torchrun restarts the workers of every node with the new
# member; a joining node costs no restart).
# GPUFLEET_NODE_RANK of a joined node: the rank it had in the run when it had one (its rank file, kept across
# reboots), else the first rank from the start's node count on that no other node took (mkdir on the shared file
# system is atomic, so two nodes joining at once never share one). torchrun numbers the nodes itself (GROUP_RANK):
# this rank only names the node for `gpufleet logs --node RANK`.
# Runs without --torchrun have no description: their processes are a fixed set (mpirun, or one process a node that
# knows its rank), which a new node cannot enter.
# A node that failed a setup step joins nothing. Exit status: 0, or 1 when a run could not be started here (its
# line says why); a run not joined for a reason above is a log line.
# The head check is a TCP connect through bash's /dev/tcp (bash(1), REDIRECTION), bounded by timeout(1).
# Needs jq (scripts/ami/01-build-tools.sh installs it on every image profile).
# Optional: GPUFLEET_ROOT prefixes the rank files (tests); GPUFLEET_JOIN_CONNECT_SECONDS (3).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_SHARED_DIR GPUFLEET_CLUSTER_USER GPUFLEET_CLUSTER_UID
readonly RUN_ID_PATTERN='^[0-9]{8}-[0-9]{6}-[0-9a-f]{4}$'
# This step runs as root and the shared file system is writable by many: it reads only the cluster user's
# descriptions, and takes from them nothing that root's shell or systemd-run would read as more than a value (the
# body runs as the cluster user, who could run it anyway).
readonly ADDRESS_PATTERN='^([0-9]{1,3}[.]){3}[0-9]{1,3}/[0-9]{1,5}$'
readonly SETTINGS_PATTERN='^(--setenv=GPUFLEET_[A-Z_]+=[A-Za-z0-9.:_-]*'$'\n'')*$'
ranks_dir=${GPUFLEET_ROOT:-}/var/lib/gpufleet/run-ranks
connect_seconds=${GPUFLEET_JOIN_CONNECT_SECONDS:-3}

if [[ -n ${GPUFLEET_FAILED_SETUP_STEPS:-} ]]; then
  log "not joining any run: setup failed ($GPUFLEET_FAILED_SETUP_STEPS)"
  exit 0
fi
command -v jq >/dev/null || die "no jq on this image: cannot read the runs' descriptions"

# The rank this node has in run $1 whose start counted $2 nodes: its own from an earlier start or join, else the
# first free one from $2 on, claimed in the run's folder $3.
node_rank() {
  local run_id=$1 rank=$2 directory=$3
  if [[ -r $ranks_dir/$run_id ]]; then
    cat "$ranks_dir/$run_id"
    return
  fi
  mkdir -p "$directory/joined"
  until mkdir "$directory/joined/$rank" 2>/dev/null; do
    rank=$((rank + 1))
  done
  echo "$rank"
}

failed=0
for description in "$GPUFLEET_SHARED_DIR"/gpufleet-runs/*/run.json; do
  [[ -f $description ]] || continue
  directory=${description%/run.json}
  run_id=${directory##*/}
  unit=gpufleet-run-$run_id
  if [[ ! $run_id =~ $RUN_ID_PATTERN ]]; then
    warn "$directory is not a run's folder: left alone"
    continue
  fi
  if [[ -e $directory/stopped || -e $directory/ended ]]; then
    continue
  fi
  if systemctl is-active --quiet "$unit"; then
    log "run $run_id: already running here"
    continue
  fi
  owner=$(stat -c %u "$description")
  if [[ $owner != "$GPUFLEET_CLUSTER_UID" ]]; then
    warn "run $run_id: $description belongs to uid $owner, not the cluster user: not joined"
    continue
  fi
  if ! head=$(jq -er '"\(.head_address)/\(.rendezvous_port)"' "$description") ||
    ! count=$(jq -er '.node_count | numbers' "$description") || ! body=$(jq -er .body "$description") ||
    ! settings=$(jq -er '.settings | to_entries[] | "--setenv=\(.key)=\(.value)"' "$description") ||
    [[ ! $head =~ $ADDRESS_PATTERN || ! $count =~ ^[0-9]+$ || ! $settings$'\n' =~ $SETTINGS_PATTERN ]]; then
    error "run $run_id: $description is not a run description: not joined"
    failed=1
    continue
  fi
  if ! timeout "$connect_seconds" bash -c ": </dev/tcp/$head" 2>/dev/null; then
    log "run $run_id: its head (${head/\//:}) does not answer: over, or its head is gone; not joined"
    continue
  fi
  mapfile -t settings <<<"$settings"
  rank=$(node_rank "$run_id" "$count" "$directory")
  mkdir -p "$ranks_dir"
  echo "$rank" >"$ranks_dir/$run_id"
  if ! systemd-run --unit="$unit" --description="gpufleet run $run_id" --uid="$GPUFLEET_CLUSTER_USER" \
    --gid="$GPUFLEET_CLUSTER_USER" "${settings[@]}" --setenv=GPUFLEET_NODE_RANK="$rank" /bin/bash -c "$body"; then
    error "run $run_id: could not start $unit"
    failed=1
    continue
  fi
  log "run $run_id: joined as node rank $rank"
done
exit "$failed"
