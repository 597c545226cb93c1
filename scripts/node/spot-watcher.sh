#!/usr/bin/env bash
# Polls the instance metadata service (IMDSv2) for a spot interruption notice or a rebalance recommendation,
# logs each new notice and runs GPUFLEET_CHECKPOINT_HOOK at most once per kind of notice: on a rebalance
# recommendation (which can come long before an interruption, or never be followed by one), and again on the
# interruption notice, so the work done since the early checkpoint is saved too.
# IMDS semantics (EC2 user guide, spot-instance-termination-notices and rebalance-recommendations;
# awsdocs/amazon-ec2-user-guide doc_source/spot-instance-termination-notices.md): spot/instance-action answers
# 404 until EC2 marks the instance for interruption, then {"action": "terminate", "time": "..."} (two minutes'
# warning); events/recommendations/rebalance answers {"noticeTime": "..."} once a recommendation was issued.
# Runs as gpufleet-spot-watcher.service; stdout goes to the journal.
set -euo pipefail

readonly INTERRUPTION=spot/instance-action REBALANCE=events/recommendations/rebalance
# The interruption is polled first: when both notices are there at once, the hook runs for the interruption (the
# last checkpoint there is time for) and the rebalance recommendation is only logged.
readonly NOTICE_PATHS=("$INTERRUPTION" "$REBALANCE")

log() { echo "spot-watcher: $*"; }
die() { echo "spot-watcher: error: $*" >&2; exit 1; }

[[ ${GPUFLEET_SPOT_WATCHER:-} =~ ^[01]$ ]] || die "GPUFLEET_SPOT_WATCHER must be 1 or 0, got '${GPUFLEET_SPOT_WATCHER:-}'"
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
# recommendation, already ran for the interruption. One run at a time: an interruption notice that comes while a
# rebalance-triggered run is still going is handled on the next poll after it.
run_hook() {
  local path=$1 notice=$2 record
  record=$(hook_record "$path")
  if [[ -z $hook ]]; then
    log "no checkpoint hook configured (node.checkpoint_hook)"
  elif [[ -f $record ]]; then
    log "checkpoint hook already ran for $path: $(<"$record")"
  elif [[ $path == "$REBALANCE" && -f $(hook_record "$INTERRUPTION") ]]; then
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
    [[ ${last_notice[$path]:-} != "$notice" ]] || continue
    last_notice[$path]=$notice
    log "notice at $path: $notice"
    run_hook "$path" "$notice"
  done
  ((iterations != 0 && iteration >= iterations)) || sleep "$poll_seconds"
done
