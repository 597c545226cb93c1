#!/usr/bin/env bash
# Turns on persistence mode and sets the application clocks to the highest pair the GPUs support: the highest
# memory clock, then the highest graphics clock supported at that memory clock (queried, never hard-coded).
# Both reset at reboot, so this runs at every boot.
set -euo pipefail

log() { echo "gpu-clocks: $*"; }
die() { echo "gpu-clocks: error: $*" >&2; exit 1; }

[[ ${GPUFLEET_MAX_CLOCKS:-} =~ ^[01]$ ]] || die "GPUFLEET_MAX_CLOCKS must be 1 or 0, got '${GPUFLEET_MAX_CLOCKS:-}'"
if [[ $GPUFLEET_MAX_CLOCKS == 0 ]]; then
  log "disabled (GPUFLEET_MAX_CLOCKS=0)"
  exit 0
fi
expected=${GPUFLEET_GPU_COUNT:?set GPUFLEET_GPU_COUNT to the number of GPUs of the instance type}

gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | grep -c .) || die "nvidia-smi lists no GPUs"
[[ $gpus -eq $expected ]] || die "nvidia-smi lists $gpus GPUs, expected $expected"

nvidia-smi -pm 1

# Lines are "MEMORY, GRAPHICS" in MHz; GPUs without application clocks print [N/A].
best=$(nvidia-smi --query-supported-clocks=memory,graphics --format=csv,noheader,nounits |
  awk -F', *' '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {
      if ($1 > memory) { memory = $1; graphics = $2 } else if ($1 == memory && $2 > graphics) { graphics = $2 }
    }
    END { if (memory) print memory "," graphics }')
if [[ -z $best ]]; then
  log "the GPUs report no supported application clocks; leaving the clocks as they are"
  exit 0
fi
nvidia-smi -ac "$best"
log "application clocks set to ${best%,*} MHz memory, ${best#*,} MHz graphics on $gpus GPUs"
