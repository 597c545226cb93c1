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

# The AMI pipeline's acceptance gate names its short-lived environment after the build: accept- and the first 8
# hex digits of the build's uuid, the part after the last ':' of both CODEBUILD_BUILD_ID (PROJECT:UUID) and
# CODEBUILD_BUILD_ARN (arn:...:build/PROJECT:UUID). Its one stack is gpufleet-NAME-cluster. The gate deploys it and
# acceptance-teardown.sh deletes it, also when started for another build by the stack's backstop rule.
acceptance_environment_name() {
  local uuid=${1##*:}
  printf 'accept-%s\n' "${uuid:0:8}"
}

# packer_image MANIFEST: the AMI id of the last run of Packer's manifest post-processor. The manifest accumulates
# runs; the image is the artifact of the last one, "REGION:ami-...".
packer_image() {
  local image
  image="$(python3 - "$1" <<'PYTHON'
import json, sys
manifest = json.load(open(sys.argv[1]))
builds = [b for b in manifest.get("builds", []) if b.get("packer_run_uuid") == manifest.get("last_run_uuid")]
print(builds[-1]["artifact_id"].split(":")[-1] if builds else "")
PYTHON
)" || return
  [[ "$image" =~ ^ami-[0-9a-f]{8}([0-9a-f]{9})?$ ]] || {
    error "no AMI id in the last run of $1 (found '${image}')"
    return 1
  }
  printf '%s\n' "$image"
}
