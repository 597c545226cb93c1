#!/usr/bin/env bash
# Starts this node's part of a run of `gpufleet run`: the transient unit gpufleet-run-RUNID as the cluster user, which
# belongs to systemd, not to the SSM agent that runs this script (docs/guides/running-jobs.md). An operator script:
# every node has it as /opt/gpufleet/ops/start-run.sh (scripts/node/operator-scripts.sh installs it at boot).
# Run Command (AWS-RunShellScript, as root, its text run by `sh -c`) sends every node of a batch the same one line
# (gpufleet/ops/runs.py node_script):
#   . /etc/gpufleet/node.env && /opt/gpufleet/ops/start-run.sh 'SPEC'
# SPEC: the run's specification, JSON (gpufleet/ops/runs.py start_spec) in base64 (RFC 4648's alphabet, which neither
# sh nor this script reads as more than a word):
#   run_id       20261126-210500-3fa2
#   first_rank   the rank of nodes[0] (a SendCommand batch holds 50 nodes at most: the batches of one run differ)
#   nodes        the batch's instance ids in rank order
#   node_count   the run's nodes, every batch together
#   settings     {"GPUFLEET_...": "value"}: the unit's environment, but for GPUFLEET_NODE_RANK
#   body         the unit's bash script
#   head_body    rank 0's own script, where it differs (torchrun: the head hosts the rendezvous store)
#   description  only for rank 0 of a run other nodes may join (torchrun with shared storage): run.json, which
#                join-runs.sh reads on the nodes that become ready later
# What it does, as root: finds this node's rank by its instance id (IMDSv2) in nodes; leaves an active unit of the run
# alone; rank 0 writes the description, replaced whole, to GPUFLEET_SHARED_DIR/gpufleet-runs/RUNID/run.json as the
# cluster user (that folder is the user's: root writes nothing there, helpers.sh as_cluster_user); then starts the unit
# (start_run_unit below: the rank file, the script in /run/gpufleet/runs/RUNID.sh, systemd-run). Every value of
# SPEC is checked before it reaches systemd-run (the run id, the numbers, the settings as join-runs.sh checks them);
# the scripts run as the cluster user, who could run them anyway.
# Prints one line, "start-run: run RUNID: started gpufleet-run-RUNID on INSTANCE as rank R of N" or "...: already
# running on INSTANCE"; errors on stderr. Exit status: 0 started or already running; 3 this node is not one of the
# nodes; 1 anything else failed (the line says what).
# The other form, `start-run.sh --joined RUNID RANK FILE`, is join-runs.sh's (a setup step, after operator-scripts):
# starts the unit of a run this node joins, as rank RANK, from FILE, the run's description as join-runs.sh read and
# checked it (its settings and body). Prints nothing when started; exit 1 when not (the line says why), another
# status when root's own folders failed (the node is broken: join-runs.sh stops there).
# Needs jq (scripts/ami/01-build-tools.sh installs it on every image profile), runuser and timeout.
# Optional: GPUFLEET_IMDS_URL, GPUFLEET_ROOT (tests).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_CLUSTER_USER
# The cluster user's shell: $1 the run's folder; the description on standard input, written to a file of the user's
# own and renamed over run.json, so that a reader never sees half of it (a link or file the user put there is the
# user's own, replaced).
# shellcheck disable=SC2016 # expanded by the user's shell
readonly WRITE_DESCRIPTION='set -eu
umask 022
mkdir -p "$1"
file=$(mktemp "$1/.run.json.XXXXXX")
cat >"$file"
chmod 0644 "$file"
mv -f "$file" "$1/run.json"'

# The image's Python virtualenv for the run (contract: /etc/gpufleet/python.env, root's, one line
# GPUFLEET_PYTHON_VENV=/abs/path or empty; scripts/node/python-env.sh writes it on a gpufleet image, deep-learning-ami.sh
# on a Deep Learning AMI). Prints the systemd-run option that hands it to the unit, or nothing when there is none or it
# is not one root alone controls: the file, the virtualenv, its bin/ and every folder above them must be root's, no
# link, not writable by group or others, so that the cluster user cannot steer what comes first on a run's PATH. The
# body (gpufleet/ops/runs.py unit_body) puts GPUFLEET_PYTHON_VENV/bin first on PATH; a run's --setup comes after it.
python_venv_setting() {
  local root=${GPUFLEET_ROOT:-} file=/etc/gpufleet/python.env venv
  if ! roots_alone "$root" "$file" || [[ ! -f $root$file ]]; then return 0; fi
  venv=$(sed -n -E 's|^GPUFLEET_PYTHON_VENV=(/[A-Za-z0-9._/-]+)$|\1|p' "$root$file" | head -n 1)
  [[ -n $venv && /$venv/ != */../* && /$venv/ != */./* ]] || return 0
  if ! roots_alone "$root" "$venv/bin" || [[ ! -d $root$venv/bin ]]; then
    warn "$venv/bin is not a folder root alone controls: the run's PATH leaves it out"
    return 0
  fi
  printf -- '--setenv=GPUFLEET_PYTHON_VENV=%s\n' "$venv"
}

# roots_alone ROOT PATH: PATH (under ROOT, the tests' prefix) and every folder above it are root's, no link, and not
# writable by group or others.
roots_alone() {
  local root=$1 path="" part
  local -a parts
  IFS=/ read -r -a parts <<<"${2#/}"
  for part in "${parts[@]}"; do
    [[ -n $part ]] || continue
    path+=/$part
    [[ -e $root$path && ! -L $root$path ]] || return 1
    [[ $(stat -c %u "$root$path") == 0 ]] || return 1
    (( (8#$(stat -c %a "$root$path") & 8#022) == 0 )) || return 1
  done
}

# start_run_unit RUN_ID RANK FILE KEY: the one way a run's unit starts on a node (both forms above). Records the
# node's RANK in root's rank file (`gpufleet logs --node` finds the node by it), writes FILE's member KEY (a JSON
# string: the unit's bash script) byte for byte into a file root owns in a folder root owns,
# /run/gpufleet/runs/RUN_ID.sh (0644 in 0755; /run is a tmpfs, so they go at the next boot), and starts the transient
# unit gpufleet-run-RUN_ID as the cluster user with FILE's settings and GPUFLEET_NODE_RANK, running
# `/bin/bash THAT_FILE`. ExecStart so holds a path alone: systemd expands $VAR, ${VAR} and $$ in ExecStart's arguments
# (systemd.service(5), "Command lines") and % specifiers (systemd.unit(5), "Specifiers"), which in a body given as
# `bash -c BODY` changed the script before bash saw it. A failure in root's own folders ends the script (the node is
# broken); a run systemd does not start returns 1. GPUFLEET_ROOT prefixes both folders (tests).
start_run_unit() {
  local run_id=$1 rank=$2 file=$3 key=$4 settings bodies=${GPUFLEET_ROOT:-}/run/gpufleet/runs
  local ranks=${GPUFLEET_ROOT:-}/var/lib/gpufleet/run-ranks body
  if [[ ! $run_id =~ $RUN_ID_PATTERN || ! $rank =~ ^[0-9]{1,7}$ ]]; then
    error "not a run id and rank: '$run_id' '$rank'"
    return 1
  fi
  if ! settings=$(run_settings "$file"); then
    error "run $run_id: its settings are not GPUFLEET_ names with plain values: not started"
    return 1
  fi
  mapfile -t settings <<<"$settings"
  local venv_setting
  venv_setting=$(python_venv_setting)
  if [[ -n $venv_setting ]]; then settings+=("$venv_setting"); fi
  mkdir -p "$ranks" || exit
  echo "$rank" >"$ranks/$run_id" || exit
  mkdir -p "$bodies" && chmod 0755 "$bodies" || exit
  body=$(mktemp "$bodies/.$run_id.XXXXXX") || exit
  if ! jq -je --arg key "$key" '.[$key] | strings' "$file" >"$body"; then
    rm -f "$body"
    error "run $run_id: no $key to run: not started"
    return 1
  fi
  chmod 0644 "$body" && mv -f "$body" "$bodies/$run_id.sh" || exit
  # A unit's processes get the limits systemd gives the unit, not those of /etc/security/limits.d, which pam_limits
  # applies to logins only (systemd.exec(5), "Process Properties": limits.conf "is not applied to system services"
  # (unconfirmed wording)): the EFA installer's unlimited memlock there never reaches a run, and libfabric's EFA
  # provider pins its buffers. The run unit sets what Slurm's own slurmd.service sets for the jobs it starts
  # (SchedMD slurm, etc/slurmd.service.in: LimitNOFILE=131072, LimitMEMLOCK=infinity, LimitSTACK=infinity).
  if ! systemd-run --unit="gpufleet-run-$run_id" --description="gpufleet run $run_id" \
    --property=LimitMEMLOCK=infinity --property=LimitNOFILE=131072 --property=LimitSTACK=infinity \
    --uid="$GPUFLEET_CLUSTER_USER" --gid="$GPUFLEET_CLUSTER_USER" "${settings[@]}" \
    --setenv=GPUFLEET_NODE_RANK="$rank" /bin/bash "$bodies/$run_id.sh"; then
    error "run $run_id: could not start gpufleet-run-$run_id"
    return 1
  fi
}

if [[ $# -eq 4 && $1 == --joined ]]; then
  start_run_unit "$2" "$3" "$4" body || exit 1
  exit 0
fi
[[ $# -eq 1 && $1 =~ ^[A-Za-z0-9+/]+={0,2}$ ]] ||
  die "usage: start-run.sh SPEC (the run's specification, base64 of its JSON, as gpufleet run sends it)"
command -v jq >/dev/null || die "no jq on this image: cannot read the run's specification"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
spec=$work/spec.json
if ! base64 -d <<<"$1" >"$spec" 2>/dev/null || ! jq -e 'type == "object"' "$spec" >/dev/null 2>&1; then
  die "SPEC is not base64 of a JSON object"
fi
read -r run_id first count < <(jq -r '"\(.run_id) \(.first_rank) \(.node_count)"' "$spec")
[[ $run_id =~ $RUN_ID_PATTERN && $first =~ ^[0-9]{1,6}$ && $count =~ ^[0-9]{1,6}$ ]] ||
  die "SPEC holds no run id, first rank and node count"
mapfile -t nodes < <(jq -r '.nodes[]? | strings' "$spec")
unit=gpufleet-run-$run_id

token=$(imds_token) || die "run $run_id: no IMDSv2 token from $IMDS_URL"
self=$(imds_get "$token" instance-id) || die "run $run_id: cannot read this node's instance id from $IMDS_URL"
rank=""
for index in "${!nodes[@]}"; do
  if [[ ${nodes[index]} == "$self" ]]; then
    rank=$((first + index))
    break
  fi
done
if [[ -z $rank ]]; then
  error "run $run_id: $self is not one of its nodes"
  exit 3
fi
if systemctl is-active --quiet "$unit"; then
  log "run $run_id: already running on $self"
  exit 0
fi

if ((rank == 0)) && jq -e 'has("description")' "$spec" >/dev/null; then
  require_settings "$NODE_SETTINGS" GPUFLEET_SHARED_DIR
  directory=$GPUFLEET_SHARED_DIR/gpufleet-runs/$run_id
  jq --indent 1 -S .description "$spec" >"$work/run.json"
  as_cluster_user 30 sh -c "$WRITE_DESCRIPTION" sh "$directory" <"$work/run.json" >/dev/null ||
    die "run $run_id: could not write its description $directory/run.json as $GPUFLEET_CLUSTER_USER" \
      "(${CLUSTER_USER_ERROR:-no message}): not started"
fi
key=body
if ((rank == 0)) && jq -e 'has("head_body")' "$spec" >/dev/null; then
  key=head_body
fi
start_run_unit "$run_id" "$rank" "$spec" "$key" || exit 1
log "run $run_id: started $unit on $self as rank $rank of $count"
