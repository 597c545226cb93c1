#!/usr/bin/env bash
# Says whether this node is ready for jobs, on the instance itself, where `gpufleet hosts` and `gpufleet status` read
# it: the instance tag GPUFLEET_READINESS_TAG (gpufleet:readiness) set to
#   ready                  every setup step before this one succeeded and the health check passed
#   not ready: REASON      the steps that failed, or the health check's failing checks (the full output is in this
#                          unit's journal and on the instance's console: `journalctl -u gpufleet-node-setup`,
#                          `aws ec2 get-console-output --instance-id ID`)
#   booting                with --booting: run-setup.sh sets it before the first step, since a rebooted or restarted
#                          instance keeps the tags of its previous boot
#   booting: step K/N NAME with --booting 'K/N NAME': run-setup.sh sets it as it starts each step, so that `gpufleet up`
#                          and `gpufleet status` show where a node's setup is (parentheses are not tag characters)
# It is the last step that sets the node up (gpufleet/user_data.py setup_scripts; only join-runs.sh comes after it),
# so it runs after storage is mounted and the other steps are done; run-setup.sh hands it the names of the steps that
# failed (GPUFLEET_FAILED_SETUP_STEPS). The health
# check is scripts/ops/node-health-check.sh as operator-scripts.sh installs it (HEALTH_CHECK): exit status 0 is a
# pass, any other a failure, whose "FAIL NAME: ..." lines name the failing checks.
# Tagging needs the AWS CLI and the node role's permission to tag its instance with this key
# (stacks/constructs/node_readiness.py); the instance id and region come from IMDSv2 (EC2 user guide,
# instance-metadata-v2-how-it-works). Tag values keep to the characters every AWS service accepts in tags: letters,
# digits, spaces and + - = . _ : / @, at most 256 of them (EC2 user guide, "Tag restrictions"); others become spaces.
# Exit status: 0 ready; 1 not ready, or the mark could not be set (the node is then not listed as ready either).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

readonly HEALTH_CHECK=/opt/gpufleet/ops/node-health-check.sh
# The health check reads nvidia-smi, fi_info and the kernel log: seconds. A check that hangs must not hold the setup
# unit (TimeoutStartSec=20min) until systemd kills it with nothing marked.
readonly HEALTH_CHECK_TIMEOUT_SECONDS=300
readonly TAG_VALUE_MAX=256

require_settings "$NODE_SETTINGS" GPUFLEET_READINESS_TAG
mode=${1:-check}
step=${2:-}
[[ ($mode == check && $# -le 1) || ($mode == --booting && $# -le 2) ]] || die "usage: node-ready.sh [--booting [STEP]]"
[[ -z $step || $step =~ ^[0-9]+/[0-9]+\ [a-z0-9-]+$ ]] || die "a step is 'K/N NAME' (3/9 shared-storage), got '$step'"
failed_steps=${GPUFLEET_FAILED_SETUP_STEPS:-}
health_check=${GPUFLEET_ROOT:-}$HEALTH_CHECK

# Sets the readiness tag to $1, a tag value. Fails, saying why, when it cannot.
mark() {
  local value=$1 token instance_id region
  if ! command -v aws >/dev/null; then
    error "no AWS CLI on this node (aws is not on PATH): cannot set $GPUFLEET_READINESS_TAG=$value"
    return 1
  fi
  if ! token=$(imds_token) || ! instance_id=$(imds_get "$token" instance-id) ||
    ! region=$(imds_get "$token" placement/region); then
    error "cannot read the instance id and region from $IMDS_URL: cannot set $GPUFLEET_READINESS_TAG=$value"
    return 1
  fi
  # Standard retries (the AWS CLI's default mode) with more attempts: a boot may come before the network settles.
  if ! AWS_RETRY_MODE=standard AWS_MAX_ATTEMPTS=6 aws ec2 create-tags --region "$region" --resources "$instance_id" \
    --tags "[{\"Key\": \"$GPUFLEET_READINESS_TAG\", \"Value\": \"$value\"}]"; then
    error "could not tag $instance_id $GPUFLEET_READINESS_TAG=$value (see the AWS CLI's message above)"
    return 1
  fi
  log "$instance_id: $GPUFLEET_READINESS_TAG=$value"
}

if [[ $mode == --booting ]]; then
  mark "booting${step:+: step $step}"
  exit
fi

if [[ -n $failed_steps ]]; then
  reason="setup failed: $failed_steps"
elif [[ ! -x $health_check ]]; then
  reason="no health check at $HEALTH_CHECK"
else
  log "running $HEALTH_CHECK"
  status=0
  output=$(timeout "$HEALTH_CHECK_TIMEOUT_SECONDS" "$health_check" 2>&1) || status=$?
  [[ -z $output ]] || printf '%s\n' "$output"
  if ((status == 0)); then
    reason=""
  elif ((status == 124)); then
    reason="health check timed out after ${HEALTH_CHECK_TIMEOUT_SECONDS}s"
  else
    failing=$(sed -nE 's/^FAIL ([A-Za-z0-9_-]+):.*/\1/p' <<<"$output" | paste -sd ' ' -)
    reason="health check failed: ${failing:-exit status $status}"
  fi
fi

if [[ -z $reason ]]; then
  mark ready
  exit
fi
error "not ready: $reason"
# The reason as a tag value: the characters tags cannot hold become spaces, and it is cut at TAG_VALUE_MAX.
value=$(printf '%s' "not ready: $reason" | tr -c 'A-Za-z0-9 +=._:/@-' ' ' | tr -s ' ')
mark "${value:0:TAG_VALUE_MAX}" || true
exit 1
