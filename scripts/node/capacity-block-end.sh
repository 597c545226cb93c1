#!/usr/bin/env bash
# Runs on a node of a Capacity Block when EC2 warns that the block is ending: logs the warning and runs
# GPUFLEET_CHECKPOINT_HOOK, once per block end, before EC2 reclaims the node.
# The timeline (EC2 user guide): forty minutes before the block's end EC2 emits the EventBridge event "Capacity
# Block Expiration Warning" ("any instances running in the reservation will begin to terminate in 10 minutes",
# capacity-blocks-monitor.html), and thirty minutes before the end it begins terminating them
# (capacity-blocks-using.html). Instance metadata carries neither the block nor its end. The cluster stack's rule
# on that event (stacks/constructs/capacity_block_warning.py) runs this script on every node of the environment
# through SSM Run Command, with the event's reservation id and end date as arguments; so the hook has about ten
# minutes. Output goes to the Run Command's output.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

readonly NOTICE_KIND=capacity-block-expiration

# end_time DATE: DATE in UTC ("2026-11-27 11:30:00 UTC") if it is an ISO 8601 time with a zone (Z or an offset,
# seconds and their fraction optional) or seconds since the epoch; fails otherwise. The event's end-date has no
# documented format: the EC2 user guide's example (capacity-blocks-monitor.html) shows only "[ODCR End Date]".
# GNU date reads the ISO forms (coreutils 9.1 checked; the older coreutils of Ubuntu 18.04 and Amazon Linux 2
# unconfirmed, and a date they cannot read is only logged as such).
readonly ISO_DATE='[0-9]{4}-[0-9]{2}-[0-9]{2}'
readonly ISO_TIME_AND_ZONE='[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?(Z|[+-][0-9]{2}(:?[0-9]{2})?)'
end_time() {
  local value=$1
  if [[ $value =~ ^${ISO_DATE}T${ISO_TIME_AND_ZONE}$ ]]; then
    date -u -d "$value" '+%Y-%m-%d %H:%M:%S UTC' 2>/dev/null
  elif [[ $value =~ ^[0-9]{1,10}$ ]]; then
    date -u -d "@$value" '+%Y-%m-%d %H:%M:%S UTC' 2>/dev/null
  else
    return 1
  fi
}

(($# == 2)) || die "usage: capacity-block-end.sh RESERVATION_ID END_DATE (from the block's expiration warning)"
reservation=$1 end=$2
# The block of this node: only nodes of a Capacity Block have this script.
require_settings "$NODE_SETTINGS" GPUFLEET_CAPACITY_BLOCK
block=$GPUFLEET_CAPACITY_BLOCK
hook=${GPUFLEET_CHECKPOINT_HOOK:-}
# Shared with spot-watcher.sh: one record per notice kind the hook ran for.
record=${GPUFLEET_ROOT:-}/var/lib/gpufleet/checkpoint-hook-runs/$NOTICE_KIND

# The rule sends the warnings of this environment's block only (its event pattern names the block's id): a
# well-formed id of another block is nothing to do; an id in a form this script does not know (the documented form is
# cr- and 17 hex digits; EC2 could lengthen it, as it did instance ids) is logged and the hook runs all the same, as
# for an end date it cannot read: the warning itself says the end is near. The id is only compared and logged
# (quoted), never run or used as a path.
if [[ $reservation =~ ^cr-[0-9a-f]{17}$ ]]; then
  if [[ $reservation != "$block" ]]; then
    log "warning for $reservation, but this node is in $block: nothing to do"
    exit 0
  fi
elif [[ $reservation != "$block" ]]; then
  log "warning for $(printf '%q' "$reservation"), not in the form of a Capacity Reservation id" \
    "(cr- and 17 hex digits); the rule sends this environment's warnings only: taken as for $block"
fi
# The warning itself says the end is near: a date this script cannot read is logged, never a reason to skip the hook.
if when=$(end_time "$end"); then
  log "Capacity Block $block ends $when; EC2 terminates its instances from 30 minutes before that"
else
  log "could not read the end date '$end' of Capacity Block $block (expected an ISO 8601 time with a zone, or" \
    "seconds since the epoch); the warning comes 40 minutes before the end, and EC2 terminates its instances from" \
    "30 minutes before it"
fi
if [[ -z $hook ]]; then
  log "no checkpoint hook configured (node.checkpoint_hook)"
elif [[ -f $record ]]; then
  log "checkpoint hook already ran for this block's end: $(<"$record")"
else
  mkdir -p "$(dirname "$record")"
  printf '%s %s\n' "$block" "$end" >"$record"
  log "running checkpoint hook: $hook"
  if GPUFLEET_NOTICE_PATH=$NOTICE_KIND GPUFLEET_NOTICE=$end bash -c "$hook"; then
    log "checkpoint hook finished"
  else
    log "checkpoint hook failed with exit status $?"
  fi
fi
