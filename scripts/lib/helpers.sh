# shellcheck shell=bash
# shellcheck disable=SC2034 # the settings sources below are read by the scripts that source this file
# Helpers shared by the scripts of scripts/node, scripts/ops and scripts/pipeline; sourced, never run. The AMI
# build's scripts/ami/*.sh have their own library (scripts/ami/lib/common.sh): Packer uploads it with them.
#
# Every script finds this file at ../lib/helpers.sh from its own directory, the same path wherever it runs: a
# checkout, the installed package (gpufleet/data/scripts), the AMI pipeline's source tree, and a node, where the
# user data installs it as /opt/gpufleet/lib/helpers.sh beside /opt/gpufleet/node/.
#
# Every line a script prints starts with its name, its file name without .sh: "mig: ...", "mig: error: ...".

# Where the settings of a place come from, as require_settings names it. Nodes: the export lines the user data
# writes (gpufleet/user_data.py). The AMI pipeline: its buildspec and project (stacks/constructs/ami_build_project.py)
# or the override a build is started with.
readonly NODE_SETTINGS="from /etc/gpufleet/node.env"
readonly PIPELINE_SETTINGS="set by the AMI pipeline's CodeBuild project, or by start-build --environment-variables-override"

# The instance metadata service, IMDSv2 (EC2 user guide, instance-metadata-v2-how-it-works: a PUT to api/token gives a
# session token, each GET carries it): GPUFLEET_IMDS_URL in tests, else the link-local endpoint. Two seconds a call:
# it answers at once or not at all. imds_token prints a token good for 60 seconds; imds_get TOKEN ITEM prints
# meta-data/ITEM and fails on an HTTP error (curl -f).
IMDS_URL=${GPUFLEET_IMDS_URL:-http://169.254.169.254}
imds_token() { curl -fsS --max-time 2 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 60" "$IMDS_URL/latest/api/token"; }
imds_get() { curl -fsS --max-time 2 -H "X-aws-ec2-metadata-token: $1" "$IMDS_URL/latest/meta-data/$2"; }

SCRIPT_NAME=${0##*/}
SCRIPT_NAME=${SCRIPT_NAME%.sh}
# The exit status of die and require_settings; a script whose exit statuses say more sets its own after sourcing.
ERROR_STATUS=1

log() { printf '%s: %s\n' "$SCRIPT_NAME" "$*"; }
warn() { printf '%s: warning: %s\n' "$SCRIPT_NAME" "$*" >&2; }
error() { printf '%s: error: %s\n' "$SCRIPT_NAME" "$*" >&2; }
die() {
  error "$@"
  exit "$ERROR_STATUS"
}

# require_settings SOURCE NAME...: every NAME must be set and non-empty. Each one that is not gets its own line,
# "NAME is not set (SOURCE)", SOURCE saying where the setting comes from; then the script exits with ERROR_STATUS.
require_settings() {
  local source=$1 name missing=0
  shift
  for name in "$@"; do
    if [[ -z ${!name:-} ]]; then
      error "$name is not set ($source)"
      missing=1
    fi
  done
  ((missing == 0)) || exit "$ERROR_STATUS"
}

# Runs of `gpufleet run` on a node (scripts/ops/start-run.sh and stop-run.sh, scripts/node/join-runs.sh;
# gpufleet/ops/runs.py); the unit's start itself is start-run.sh's alone (start_run_unit).
# The trust model: root and the operator are trusted; the cluster user (GPUFLEET_CLUSTER_USER), every workload and
# every file on the shared file system are not. So root never creates, writes, renames or follows anything in a
# directory the cluster user controls (the run folders under GPUFLEET_SHARED_DIR/gpufleet-runs): what is done or read
# there is done by a process of the cluster user's (as_cluster_user), and root takes what it prints as a hostile value.
readonly RUN_ID_PATTERN='^[0-9]{8}-[0-9]{6}-[0-9a-f]{4}$'
# A run's settings as systemd-run options, one a line: GPUFLEET_ names, values without anything a shell or systemd
# would read as more than a value (systemd expands $ and % in ExecStart, not in --setenv values; none gets either).
readonly SETTINGS_PATTERN='^(--setenv=GPUFLEET_[A-Z_]+=[A-Za-z0-9.:_-]*'$'\n'')*$'

# as_cluster_user SECONDS COMMAND...: COMMAND run as the cluster user (runuser -u, util-linux: root only, no password,
# a PAM session of its own) from /, its standard input the caller's. Prints at most 1 MiB of what it printed, and fails
# with its exit status, or 124 when it outlasted SECONDS. The bound is root's: timeout(1) runs as root, so no process
# of the user's can stop it (SIGTERM at SECONDS, SIGKILL 5 s later: timeout(1) --kill-after). Its output goes to a file
# of root's own, never a pipe: a process of the user's that kept a pipe open would hold root until it ends. The last
# line it printed on stderr, cut to 200 printable characters, is left in CLUSTER_USER_ERROR for the caller's message.
CLUSTER_USER_ERROR=""
as_cluster_user() {
  local seconds=$1 work status=0
  shift
  work=$(mktemp -d) || return
  (cd / && timeout -k 5 "$seconds" runuser -u "$GPUFLEET_CLUSTER_USER" -- "$@" >"$work/out" 2>"$work/err") || status=$?
  head -c 1048576 "$work/out"
  CLUSTER_USER_ERROR=$(tail -n 1 "$work/err" | tr -cd '[:print:]' | head -c 200)
  ((status != 124)) || CLUSTER_USER_ERROR="no answer within ${seconds}s"
  rm -rf "$work"
  return "$status"
}

# run_settings FILE: the settings of the run FILE describes (its "settings", a JSON object) as systemd-run options, one
# a line; fails on any setting outside SETTINGS_PATTERN (join-runs.sh checks a description with it, start-run.sh
# starts the unit with it).
run_settings() {
  local settings
  settings=$(jq -er '.settings | to_entries[] | "--setenv=\(.key)=\(.value)"' "$1") &&
    [[ $settings$'\n' =~ $SETTINGS_PATTERN ]] && printf '%s\n' "$settings"
}
