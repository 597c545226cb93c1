#!/usr/bin/env bash
# The default checkpoint hook: every node has it as /opt/gpufleet/ops/save-checkpoint.sh (installed at boot by
# scripts/node/operator-scripts.sh), and the user data links /usr/local/bin/save-checkpoint to it where
# node.checkpoint_hook names that path (gpufleet/user_data.py). Asks the training processes on this node to save a
# checkpoint now, and waits a bounded time for each to say it has. Run by the spot watcher (interruption notice,
# rebalance recommendation, Auto Scaling termination), by the Capacity Block warning, and through SSM Run Command
# when another node of the environment is warned or when gpufleet removes nodes; GPUFLEET_NOTICE_PATH and
# GPUFLEET_NOTICE say which.
#
# The contract with training code (docs/guides/interruptions.md, in DIR = /run/gpufleet/checkpoint, mode 1777, made
# at boot by /etc/tmpfiles.d/gpufleet-checkpoint.conf):
# - a process registers by writing its process id into DIR/NAME.pid (NAME: any name unique on the node);
# - the hook writes DIR/request (key=value lines: id, notice_path, notice, requested_at, deadline, checkpoint_dir),
#   replaced whole, then sends SIGUSR1 to every registered process that is alive and owned by the owner of its .pid
#   file (so no user can have another user's process signalled);
# - a process acknowledges by writing the request's id into DIR/NAME.done once its checkpoint is saved.
# It exits 0 when every signalled process acknowledged (or exited, or none is registered), 2 when the wait ran out
# first, 1 on bad usage. The wait: --wait SECONDS, default 90, inside the two minutes between a spot interruption
# notice and the interruption (EC2 user guide, spot-instance-termination-notices.html).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

readonly DIR=${GPUFLEET_ROOT:-}/run/gpufleet/checkpoint
readonly TIMED_OUT=2
wait_seconds=90
while (($#)); do
  case $1 in
    --wait) (($# >= 2)) || die "--wait needs a number of seconds"; wait_seconds=$2; shift 2 ;;
    *) die "usage: save-checkpoint [--wait SECONDS] (got '$1')" ;;
  esac
done
[[ $wait_seconds =~ ^[0-9]+$ ]] || die "--wait must be a whole number of seconds, got '$wait_seconds'"

{ mkdir -p "$DIR" && chmod 1777 "$DIR"; } 2>/dev/null ||
  die "cannot prepare $DIR (the hook runs as root: from the spot watcher or SSM Run Command)"

now=$(date +%s)
id=$now-$$
deadline=$((now + wait_seconds))
# Where training code should write: the shared file system's data folder when the environment has shared storage
# (GPUFLEET_SHARED_DATA_DIR: the folder exported to S3 where there is a data repository, so the checkpoints outlive
# the file system too; gpufleet/user_data.py), never /scratch (instance store) or the root volume, both gone with the
# node.
checkpoint_dir=${GPUFLEET_SHARED_DATA_DIR:+$GPUFLEET_SHARED_DATA_DIR/checkpoints}
request=$(mktemp "$DIR/.request.XXXXXX")
printf 'id=%s\nnotice_path=%s\nnotice=%s\nrequested_at=%s\ndeadline=%s\ncheckpoint_dir=%s\n' "$id" \
  "${GPUFLEET_NOTICE_PATH:-manual}" "${GPUFLEET_NOTICE:-}" "$now" "$deadline" "$checkpoint_dir" >"$request"
chmod 0644 "$request"
# -T: a `request` that a user made a folder or a link to one is not a folder to move into (mv(1),
# --no-target-directory): the rename replaces a link itself and fails on a folder.
mv -fT "$request" "$DIR/request"

# alive PID: the process runs (an exited one its parent has not reaped yet stays in /proc as a zombie, state Z; the
# state is the field after the command name in parentheses, proc(5)).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# read_small FILE: its first 64 bytes without white space, or nothing, within 2 seconds. The folder is every user's:
# a file checked to be a regular one can be swapped for a FIFO before it is opened, which would hold a plain read.
read_small() {
  { timeout 2 head -c 64 -- "$1" 2>/dev/null || true; } | tr -d '[:space:]'
}

declare -A signalled=()  # NAME -> process id
for registration in "$DIR"/*.pid; do
  [[ -f $registration && ! -L $registration ]] || continue
  name=$(basename "$registration" .pid)
  pid=$(read_small "$registration")
  if [[ ! $pid =~ ^[1-9][0-9]*$ ]]; then
    log "$registration does not hold a process id; skipped"
  elif ! alive "$pid"; then
    log "process $pid of $registration has exited; skipped"
  elif [[ $(stat -c %u "$registration") != "$(stat -c %u "/proc/$pid")" ]]; then
    log "process $pid is not owned by the owner of $registration; skipped"
  elif kill -USR1 "$pid" 2>/dev/null; then
    signalled[$name]=$pid
  else
    log "cannot signal process $pid of $registration; skipped"
  fi
done
names="${!signalled[*]}"
log "request $id (${GPUFLEET_NOTICE_PATH:-manual}): asked ${#signalled[@]} process(es) to checkpoint" \
  "(${names:-none registered}); waiting up to ${wait_seconds}s"

while :; do
  pending=()
  for name in "${!signalled[@]}"; do
    if [[ -f $DIR/$name.done && ! -L $DIR/$name.done && $(read_small "$DIR/$name.done") == "$id" ]]; then
      unset "signalled[$name]"
    elif ! alive "${signalled[$name]}"; then
      log "$name exited without acknowledging request $id"
      unset "signalled[$name]"
    else
      pending+=("$name")
    fi
  done
  if ((${#pending[@]} == 0)); then
    log "request $id: done"
    exit 0
  fi
  if (($(date +%s) >= deadline)); then
    log "request $id: no acknowledgement from ${pending[*]} within ${wait_seconds}s"
    exit "$TIMED_OUT"
  fi
  sleep 1
done
