#!/usr/bin/env bash
# Polls the instance metadata service (IMDSv2) for a spot interruption notice or a rebalance recommendation,
# logs each new notice and runs GPUFLEET_CHECKPOINT_HOOK at most once per kind of notice: on a rebalance
# recommendation (which can come long before an interruption, or never be followed by one), and again on the
# interruption notice, so the work done since the early checkpoint is saved too.
# IMDS semantics (EC2 user guide, spot-instance-termination-notices and rebalance-recommendations;
# awsdocs/amazon-ec2-user-guide doc_source/spot-instance-termination-notices.md): spot/instance-action answers
# 404 until EC2 marks the instance for interruption, then {"action": "terminate", "time": "..."} (two minutes'
# warning); events/recommendations/rebalance answers {"noticeTime": "..."} once a recommendation was issued.
# On a node of an Auto Scaling group (fleet.backend auto-scaling: GPUFLEET_LIFECYCLE_HOOK names the group's
# termination lifecycle hook) it also polls autoscaling/target-lifecycle-state, which Auto Scaling sets to
# Terminated when the node is about to be terminated (EC2 Auto Scaling user guide,
# retrieving-target-lifecycle-state-through-imds: the primary steady states are InService and Terminated), runs the
# hook once for that too, then completes the lifecycle action (CONTINUE) so the termination need not wait for the
# hook's heartbeat timeout. That call needs the AWS CLI on the node, which every AMI profile installs (version 2,
# scripts/ami/14-aws-cli.sh); an image given by ami.id may have none. Without it the watcher logs so once, when the termination comes, and the termination goes on when the heartbeat timeout passes
# (10 minutes: stacks/constructs/gpu_auto_scaling_group.py), after the hook has run.
# Runs as gpufleet-spot-watcher.service; stdout goes to the journal.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

readonly INTERRUPTION=spot/instance-action REBALANCE=events/recommendations/rebalance
readonly LIFECYCLE=autoscaling/target-lifecycle-state TERMINATED=Terminated
lifecycle_hook=${GPUFLEET_LIFECYCLE_HOOK:-}
# The interruption is polled first: when it is there with another notice, the hook runs for the interruption (the
# last checkpoint there is time for) and the others are only logged.
notice_paths=("$INTERRUPTION")
[[ -z $lifecycle_hook ]] || notice_paths+=("$LIFECYCLE")
notice_paths+=("$REBALANCE")
readonly NOTICE_PATHS=("${notice_paths[@]}")

require_settings "$NODE_SETTINGS" GPUFLEET_SPOT_WATCHER
[[ $GPUFLEET_SPOT_WATCHER =~ ^[01]$ ]] || die "GPUFLEET_SPOT_WATCHER must be 1 or 0, got '$GPUFLEET_SPOT_WATCHER'"
if [[ $GPUFLEET_SPOT_WATCHER == 0 ]]; then
  log "disabled (GPUFLEET_SPOT_WATCHER=0)"
  exit 0
fi
imds=${GPUFLEET_IMDS_URL:-http://169.254.169.254}
poll_seconds=${GPUFLEET_POLL_SECONDS:-5}
iterations=${GPUFLEET_WATCH_ITERATIONS:-0}
token_ttl=${GPUFLEET_IMDS_TOKEN_TTL_SECONDS:-21600}
hook=${GPUFLEET_CHECKPOINT_HOOK:-}
# One record per notice kind the hook ran for, kept on the root volume, so a restart of the service does not run
# the hook again for the same kind.
hook_runs=${GPUFLEET_ROOT:-}/var/lib/gpufleet/checkpoint-hook-runs

# The group's name: GPUFLEET_AUTO_SCALING_GROUP, followed by "-" and the node's image id when
# GPUFLEET_GROUP_NAME_HAS_IMAGE is 1 (fleet.rollout replace-all; stacks/constructs/gpu_auto_scaling_group.py).
group=${GPUFLEET_AUTO_SCALING_GROUP:-}
group_has_image=${GPUFLEET_GROUP_NAME_HAS_IMAGE:-0}
# The group of GPUFLEET_LIFECYCLE_HOOK, whose name complete-lifecycle-action needs.
[[ -z $lifecycle_hook ]] || require_settings "$NODE_SETTINGS" GPUFLEET_AUTO_SCALING_GROUP
[[ $group_has_image =~ ^[01]$ ]] || die "GPUFLEET_GROUP_NAME_HAS_IMAGE must be 1 or 0, got '$group_has_image'"

[[ $poll_seconds =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "GPUFLEET_POLL_SECONDS must be a number of seconds, got '$poll_seconds'"
[[ $iterations =~ ^[0-9]+$ ]] || die "GPUFLEET_WATCH_ITERATIONS must be a whole number (0: forever), got '$iterations'"
[[ $token_ttl =~ ^[0-9]+$ && $token_ttl -ge 1 && $token_ttl -le 21600 ]] ||
  die "GPUFLEET_IMDS_TOKEN_TTL_SECONDS must be 1-21600, got '$token_ttl'"

token=""
token_time=0
declare -A last_notice=()

refresh_token() {
  if token=$(curl -fsS --max-time 2 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: $token_ttl" \
    "$imds/latest/api/token"); then
    token_time=$SECONDS
  else
    token=""
    log "cannot get an IMDSv2 token from $imds; trying again"
  fi
}

# Prints the body of metadata path $1 when IMDS has it. Fails with 1 on 404 (no notice) and errors, and with 2
# when the token has expired. Runs in a command substitution, so it logs to stderr (the journal too).
metadata() {
  local response status
  response=$(curl -sS --max-time 2 -H "X-aws-ec2-metadata-token: $token" -w '\n%{http_code}' \
    "$imds/latest/meta-data/$1") || { log "cannot reach $imds" >&2; return 1; }
  status=${response##*$'\n'}
  case $status in
    200) echo "${response%$'\n'*}" ;;
    404) return 1 ;;
    401) return 2 ;;
    *) log "IMDS answered $1 with HTTP $status" >&2; return 1 ;;
  esac
}

# Where the run of the hook for notice path $1 is recorded.
hook_record() { echo "$hook_runs/${1//\//_}"; }

# Runs the hook for notice path $1 (body $2) unless it already ran for that kind, or, for a rebalance
# recommendation or a lifecycle termination, already ran for the interruption. One run at a time: an interruption
# notice that comes while a rebalance-triggered run is still going is handled on the next poll after it.
run_hook() {
  local path=$1 notice=$2 record
  record=$(hook_record "$path")
  if [[ -z $hook ]]; then
    log "no checkpoint hook configured (node.checkpoint_hook)"
  elif [[ -f $record ]]; then
    log "checkpoint hook already ran for $path: $(<"$record")"
  elif [[ $path != "$INTERRUPTION" && -f $(hook_record "$INTERRUPTION") ]]; then
    log "checkpoint hook already ran for $INTERRUPTION; not running it for $path"
  else
    mkdir -p "$hook_runs"
    printf '%s\n' "$notice" >"$record"
    log "running checkpoint hook for $path: $hook"
    if GPUFLEET_NOTICE_PATH=$path GPUFLEET_NOTICE=$notice bash -c "$hook"; then
      log "checkpoint hook finished"
    else
      log "checkpoint hook failed with exit status $?"
    fi
  fi
}

# Lets the group terminate the node now instead of at the hook's heartbeat timeout.
complete_lifecycle_action() {
  local instance_id region name=$group image_id
  if ! command -v aws >/dev/null; then
    log "no AWS CLI on this node (aws is not on PATH): cannot complete the lifecycle action of hook" \
      "$lifecycle_hook, so the termination waits for the hook's heartbeat timeout"
    return 0
  fi
  if ! instance_id=$(metadata instance-id) || ! region=$(metadata placement/region); then
    log "cannot read the instance id and region from $imds: the termination goes on when $lifecycle_hook times out"
    return 0
  fi
  if [[ $group_has_image == 1 ]]; then
    image_id=$(metadata ami-id) || { log "cannot read the image id from $imds"; return 0; }
    name=$group-$image_id
  fi
  log "completing lifecycle action $lifecycle_hook of $name for $instance_id"
  aws autoscaling complete-lifecycle-action --region "$region" --auto-scaling-group-name "$name" \
    --lifecycle-hook-name "$lifecycle_hook" --instance-id "$instance_id" --lifecycle-action-result CONTINUE ||
    log "complete-lifecycle-action failed; the termination goes on when $lifecycle_hook times out"
}

log "watching $imds every ${poll_seconds}s for ${NOTICE_PATHS[*]}"
iteration=0
while ((iterations == 0 || iteration < iterations)); do
  iteration=$((iteration + 1))
  if [[ -z $token ]] || ((SECONDS - token_time >= token_ttl / 2)); then
    refresh_token
  fi
  for path in "${NOTICE_PATHS[@]}"; do
    [[ -n $token ]] || break
    status=0
    notice=$(metadata "$path") || status=$?
    if ((status == 2)); then
      token=""
    fi
    ((status == 0)) || continue
    # The target lifecycle state is there all along (InService); only Terminated is a notice.
    [[ $path != "$LIFECYCLE" || $notice == "$TERMINATED" ]] || continue
    [[ ${last_notice[$path]:-} != "$notice" ]] || continue
    last_notice[$path]=$notice
    log "notice at $path: $notice"
    run_hook "$path" "$notice"
    [[ $path != "$LIFECYCLE" ]] || complete_lifecycle_action
  done
  ((iterations != 0 && iteration >= iterations)) || sleep "$poll_seconds"
done
