#!/usr/bin/env bash
# Turns on persistence mode and locks the clocks at the highest pair the GPUs support: the highest memory clock,
# then the highest graphics clock supported at that memory clock (queried, never hard-coded). Both reset at
# reboot, so this runs at every boot.
# The nvidia-smi manual (https://docs.nvidia.com/deploy/nvidia-smi/index.html) says of -ac: "This option is
# deprecated and will be removed in in a future CUDA release. Please use -lmc for locking memory clocks and -lgc
# for locking graphics clocks"; of -lmc: "this option does not work on GPUs based on NVIDIA Hopper architectures;
# to lock memory clocks on those systems use --lock-memory-clocks-deferred instead", whose clock "takes effect
# the next time the GPU is initialized" (here: from the next boot on). So: -lgc, then -lmc before Hopper
# (compute capability 9.0) and -lmcd from Hopper on; -ac only for a driver that has no -lgc.
# Clocks are tuning, not a requirement: whatever nvidia-smi refuses is a warning, and the script exits 0 so that
# node setup goes on.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_MAX_CLOCKS
[[ $GPUFLEET_MAX_CLOCKS =~ ^[01]$ ]] || die "GPUFLEET_MAX_CLOCKS must be 1 or 0, got '$GPUFLEET_MAX_CLOCKS'"
if [[ $GPUFLEET_MAX_CLOCKS == 0 ]]; then
  log "disabled (GPUFLEET_MAX_CLOCKS=0)"
  exit 0
fi
require_settings "$NODE_SETTINGS" GPUFLEET_GPU_COUNT GPUFLEET_GPU_COMPUTE_CAPABILITY
expected=$GPUFLEET_GPU_COUNT
capability=$GPUFLEET_GPU_COMPUTE_CAPABILITY
[[ $capability =~ ^([0-9]+)\.[0-9]+$ ]] ||
  die "GPUFLEET_GPU_COMPUTE_CAPABILITY must be MAJOR.MINOR (e.g. 8.0), got '$capability'"
memory_lock_is_deferred=$((BASH_REMATCH[1] >= 9))

# A GPU missing is a broken node, not a clock setting: that still fails the setup.
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | grep -c .) || die "nvidia-smi lists no GPUs"
[[ $gpus -eq $expected ]] || die "nvidia-smi lists $gpus GPUs, expected $expected"

# Runs nvidia-smi ARGS and shows what it said. Fails when it exits non-zero (a driver without the option says
# "Invalid combination of input arguments" and exits 2) or when it reports the setting "not supported", which it
# treats as a warning and exits 0 for ("Treating as warning and moving on.").
apply() {
  local output status=0
  output=$(nvidia-smi "$@" 2>&1) || status=$?
  [[ -z $output ]] || printf '%s\n' "$output"
  [[ $status -eq 0 ]] && ! grep -qi "not supported" <<<"$output"
}

apply -pm 1 || warn "persistence mode is not on (nvidia-smi -pm 1 failed)"

# Lines are "MEMORY, GRAPHICS" in MHz; GPUs without clock control print [N/A]. Prints "MEMORY GRAPHICS
# MEMORY_CLOCK_COUNT".
read -r memory graphics memory_clocks < <(nvidia-smi --query-supported-clocks=memory,graphics --format=csv,noheader,nounits |
  awk -F', *' '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {
      seen[$1] = 1
      if ($1 > memory) { memory = $1; graphics = $2 } else if ($1 == memory && $2 > graphics) { graphics = $2 }
    }
    END { if (memory) print memory, graphics, length(seen) }') || true
if [[ -z ${memory:-} ]]; then
  log "the GPUs report no supported clocks; leaving the clocks as they are"
  exit 0
fi

if apply -lgc "$graphics,$graphics"; then
  log "graphics clock locked at $graphics MHz on $gpus GPUs"
  if [[ $memory_clocks -eq 1 ]]; then
    log "memory clock: the GPUs have one ($memory MHz), nothing to lock"
  elif [[ $memory_lock_is_deferred -eq 1 ]]; then
    if apply -lmcd "$memory"; then
      log "memory clock $memory MHz set deferred: it takes effect when the GPUs are next initialized (next boot)"
    else
      warn "memory clock not locked (nvidia-smi -lmcd $memory failed); graphics clock locked"
    fi
  elif apply -lmc "$memory,$memory"; then
    log "memory clock locked at $memory MHz on $gpus GPUs"
  else
    warn "memory clock not locked (nvidia-smi -lmc $memory,$memory failed); graphics clock locked"
  fi
elif apply -ac "$memory,$graphics"; then
  log "application clocks set to $memory MHz memory, $graphics MHz graphics on $gpus GPUs (this driver has no -lgc)"
else
  warn "clocks left as they are: nvidia-smi accepted neither -lgc $graphics,$graphics nor -ac $memory,$graphics (its output is above)"
fi
