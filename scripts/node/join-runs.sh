#!/usr/bin/env bash
# Joins this node to the torchrun runs under way on the cluster: a replacement for a lost spot node, or any node that
# becomes ready after a run started, takes part in it without anyone starting it by hand. The setup step after
# node-ready (gpufleet/user_data.py setup_scripts), on nodes with shared storage only.
# `gpufleet run --torchrun` has rank 0 write each run's description to GPUFLEET_SHARED_DIR/gpufleet-runs/RUNID/run.json
# (gpufleet/ops/runs.py run_description: JSON, written by the cluster user: scripts/ops/start-run.sh); `gpufleet stop`
# adds a file `stopped` beside it (stop-run.sh), the head's unit a file `ended` when its torchrun ends. This step starts
# every described run that is neither, is not already running here, and whose head still answers on its rendezvous
# port, as the same unit gpufleet run starts, through the same script: `start-run.sh --joined RUNID RANK FILE`
# (gpufleet-run-RUNID, as the cluster user, with the run's environment), the operator script installed under
# /opt/gpufleet/ops by the step before node-ready (operator-scripts.sh). The unit runs the others' torchrun line, whose
# elastic rendezvous takes the node in at its next round (torchrun restarts the workers of every node with the new
# member; a joining node costs no restart).
# GPUFLEET_NODE_RANK of a joined node: the rank it had in the run when it had one (its rank file, root's, kept across
# reboots), else the first rank from the start's node count on that no other node took: a folder joined/RANK made
# beside the description (mkdir on the shared file system is atomic, so two nodes joining at once never share one),
# trying at most MAX_CLAIMS ranks. torchrun numbers the nodes itself (GROUP_RANK): this rank only names the node for
# `gpufleet logs --node RANK`.
# Runs without --torchrun have no description: their processes are a fixed set (mpirun, or one process a node that
# knows its rank), which a new node cannot enter.
# Root and the cluster user: the run folders are the cluster user's (and the shared file system is writable by many),
# so root lists, reads and writes nothing there itself: a process of the cluster user's does (helpers.sh
# as_cluster_user, bounded in time), and root takes its answers as hostile values. The reader follows no link, opens
# only a regular file (a FIFO swapped in after the check blocks only the user's reader, until its time is up), reads
# at most 1 MiB of it, and says whose it is: only the cluster user's descriptions are joined. From a description root
# takes nothing that its shell or systemd-run would read as more than a value (the script runs as the cluster user, who
# could run it anyway).
# A node that failed a setup step joins nothing; one without the start script (the operator scripts not installed)
# says so in one line and joins nothing. Exit status: 0, or 1 when a run could not be read or started here (its line
# says why), or the start script's own when root's folders failed there (the node is broken: the step stops); a run
# not joined for a reason above is a log line.
# The head check is a TCP connect through bash's /dev/tcp (bash(1), REDIRECTION), bounded by timeout(1).
# Needs jq (scripts/ami/01-build-tools.sh installs it on every image profile), runuser and timeout.
# Optional: GPUFLEET_ROOT prefixes root's rank files and run scripts (tests); GPUFLEET_JOIN_CONNECT_SECONDS (3).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_SHARED_DIR GPUFLEET_CLUSTER_USER GPUFLEET_CLUSTER_UID
readonly ADDRESS_PATTERN='^([0-9]{1,3}[.]){3}[0-9]{1,3}/[0-9]{1,5}$'
readonly MAX_CLAIMS=1000
# What the cluster user's processes do (sh), each bounded by as_cluster_user's time.
# shellcheck disable=SC2016 # expanded by the user's shell
{
  # $1 the runs' folder: prints the name of every folder in it that holds a run.json, one a line.
  readonly LIST_RUNS='cd "$1" 2>/dev/null || exit 0
for name in *; do
  if [ -d "$name" ] && { [ -e "$name/run.json" ] || [ -L "$name/run.json" ]; }; then printf "%s\n" "$name"; fi
done'
  # $1 a run's folder, $2 the cluster user's uid (bash): prints "over" (stopped or ended), "not a file" (run.json is a
  # link or not a regular file, or the folder a link), "owners FOLDER_UID FILE_UID" (the folder or run.json is not the
  # cluster user's), or "description" then the description, at most 1 MiB of it. The type and owner are those of the
  # file it opened (stat of /dev/fd/3), so a file swapped in after the checks is caught too.
  readonly READ_RUN='d=$1
if [[ -e $d/stopped || -L $d/stopped || -e $d/ended || -L $d/ended ]]; then echo over; exit 0; fi
if [[ -L $d || -L $d/run.json || ! -f $d/run.json ]]; then echo "not a file"; exit 0; fi
exec 3<"$d/run.json"
read -r owner mode < <(stat -L -c "%u %f" /dev/fd/3)
folder=$(stat -c %u "$d")
if (((0x$mode & 0xF000) != 0x8000)); then echo "not a file"; exit 0; fi
if [[ $owner != "$2" || $folder != "$2" ]]; then echo "owners $folder $owner"; exit 0; fi
echo description
head -c 1048576 <&3'
  # $1 a run's folder, $2 the first rank to try, $3 how many: makes $1/joined/RANK for the first RANK no other node
  # made, and prints RANK.
  readonly CLAIM_RANK='set -eu
joined=$1/joined rank=$2 last=$(($2 + $3))
if [ -L "$joined" ] || { [ -e "$joined" ] && [ ! -d "$joined" ]; }; then
  echo "$joined is not a folder: remove it" >&2
  exit 1
fi
mkdir -p "$joined"
until mkdir "$joined/$rank" 2>/dev/null; do
  if [ ! -d "$joined/$rank" ]; then echo "cannot make $joined/$rank" >&2; exit 1; fi
  rank=$((rank + 1))
  if [ "$rank" -ge "$last" ]; then echo "ranks $2 to $((last - 1)) are all taken" >&2; exit 1; fi
done
echo "$rank"'
}
runs=$GPUFLEET_SHARED_DIR/gpufleet-runs
ranks_dir=${GPUFLEET_ROOT:-}/var/lib/gpufleet/run-ranks
connect_seconds=${GPUFLEET_JOIN_CONNECT_SECONDS:-3}
# The operator scripts' folder beside this script's: /opt/gpufleet/ops on a node.
start_run=$(dirname "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")")/ops/start-run.sh

if [[ -n ${GPUFLEET_FAILED_SETUP_STEPS:-} ]]; then
  log "not joining any run: setup failed ($GPUFLEET_FAILED_SETUP_STEPS)"
  exit 0
fi
[[ -x $start_run ]] || die "not joining any run: no start script $start_run (the operator scripts are not installed)"
command -v jq >/dev/null || die "no jq on this image: cannot read the runs' descriptions"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
as_cluster_user 30 sh -c "$LIST_RUNS" sh "$runs" </dev/null >"$work/runs" ||
  die "cannot list $runs as $GPUFLEET_CLUSTER_USER (${CLUSTER_USER_ERROR:-no message})"
mapfile -t names <"$work/runs"

failed=0
for name in "${names[@]}"; do
  directory=$runs/$name
  if [[ ! $name =~ $RUN_ID_PATTERN ]]; then
    warn "$runs/${name//[^[:alnum:]._-]/?} is not a run's folder: left alone"
    continue
  fi
  run_id=$name
  if ! as_cluster_user 30 bash -c "$READ_RUN" bash "$directory" "$GPUFLEET_CLUSTER_UID" </dev/null >"$work/answer"; then
    error "run $run_id: cannot read $directory/run.json as $GPUFLEET_CLUSTER_USER" \
      "(${CLUSTER_USER_ERROR:-no message}): not joined"
    failed=1
    continue
  fi
  state=$(head -n 1 "$work/answer")
  [[ $state != over ]] || continue
  if systemctl is-active --quiet "gpufleet-run-$run_id"; then
    log "run $run_id: already running here"
    continue
  fi
  if [[ $state == "not a file" ]]; then
    warn "run $run_id: $directory/run.json is a link or not a regular file: not joined"
    continue
  elif [[ $state =~ ^owners\ [0-9]{1,10}\ [0-9]{1,10}$ ]]; then
    read -r _ folder owner <<<"$state"
    warn "run $run_id: $directory (uid $folder) and its run.json (uid $owner) must be the cluster user's: not joined"
    continue
  fi
  description=$work/$run_id.json
  tail -n +2 "$work/answer" >"$description"
  if [[ $state != description ]] || ! head=$(jq -er '"\(.head_address)/\(.rendezvous_port)"' "$description") ||
    ! count=$(jq -er '.node_count | numbers' "$description") || ! jq -e '.body | strings' "$description" >/dev/null ||
    ! run_settings "$description" >/dev/null || [[ ! $head =~ $ADDRESS_PATTERN || ! $count =~ ^[0-9]{1,6}$ ]]; then
    error "run $run_id: $directory/run.json is not a run description: not joined"
    failed=1
    continue
  fi
  if ! timeout "$connect_seconds" bash -c ": </dev/tcp/$head" 2>/dev/null; then
    log "run $run_id: its head (${head/\//:}) does not answer: over, or its head is gone; not joined"
    continue
  fi
  if [[ -r $ranks_dir/$run_id ]]; then
    rank=$(<"$ranks_dir/$run_id")
  elif as_cluster_user 60 sh -c "$CLAIM_RANK" sh "$directory" "$count" "$MAX_CLAIMS" </dev/null >"$work/rank"; then
    rank=$(head -c 16 "$work/rank")
    [[ $rank =~ ^[0-9]{1,7}$ ]] && ((rank >= count && rank < count + MAX_CLAIMS)) || rank=""
  else
    rank=""
  fi
  if [[ ! $rank =~ ^[0-9]{1,7}$ ]]; then
    error "run $run_id: could not take a rank in $directory/joined as $GPUFLEET_CLUSTER_USER" \
      "(${CLUSTER_USER_ERROR:-no answer}): not joined"
    failed=1
    continue
  fi
  # 1: not started (start-run's line says why); another status: root's own folders failed, which ends this step.
  status=0
  "$start_run" --joined "$run_id" "$rank" "$description" || status=$?
  if ((status == 1)); then
    failed=1
    continue
  fi
  ((status == 0)) || exit "$status"
  log "run $run_id: joined as node rank $rank"
done
exit "$failed"
