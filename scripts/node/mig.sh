#!/usr/bin/env bash
# Splits every GPU into as many MIG instances of GPUFLEET_MIG_PROFILE as fit (GPU and compute instances).
# MIG instances never survive a reboot, and what MIG mode does depends on the GPU generation (NVIDIA MIG user
# guide, "Getting Started with MIG" > "Enable MIG Mode",
# https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html):
# - Ampere (compute capability 8.x): "when MIG mode is enabled, the driver will attempt to reset the GPU", and
#   when it cannot, the mode stays pending until a GPU reset or a reboot; the mode "is persistent across system
#   reboots (there is a status bit stored in the GPU InfoROM)". So a GPU is reset at most once in its life here.
# - Hopper and later (9.0+): "enabling MIG mode no longer requires a GPU reset to take effect", and "MIG mode is
#   no longer persistent across system reboots", so it is enabled again at every boot and never reset.
# This runs at every boot; a GPU with no room left for the profile is left as it is.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

profile=${GPUFLEET_MIG_PROFILE:-}
if [[ -z $profile ]]; then
  log "disabled (GPUFLEET_MIG_PROFILE is empty)"
  exit 0
fi
require_settings "$NODE_SETTINGS" GPUFLEET_GPU_COUNT GPUFLEET_GPU_COMPUTE_CAPABILITY
expected=$GPUFLEET_GPU_COUNT
capability=$GPUFLEET_GPU_COMPUTE_CAPABILITY
[[ $capability =~ ^([0-9]+)\.[0-9]+$ ]] ||
  die "GPUFLEET_GPU_COMPUTE_CAPABILITY must be MAJOR.MINOR (e.g. 8.0), got '$capability'"
# Hopper is compute capability 9.0; every later generation enables MIG the Hopper way.
enabling_needs_reset=$((BASH_REMATCH[1] < 9))

# Prints "INDEX CURRENT PENDING" per GPU, e.g. "0 Enabled Enabled".
mig_modes() {
  nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv,noheader | tr -d ',' | grep .
}
# GPU indexes whose current MIG mode is not Enabled, space-separated.
not_enabled_gpus() {
  mig_modes | awk '$2 != "Enabled" { print $1 }' | paste -sd ' '
}

mapfile -t modes < <(mig_modes)
[[ ${#modes[@]} -eq $expected ]] || die "nvidia-smi lists ${#modes[@]} GPUs, expected $expected"

for line in "${modes[@]}"; do
  read -r index current pending <<<"$line"
  case $current in
    Enabled) ;;
    Disabled)
      # Pending already (asked for earlier in this boot, not reset yet): asking again changes nothing.
      if [[ $pending != Enabled ]]; then
        log "GPU $index: enabling MIG mode"
        nvidia-smi -i "$index" -mig 1
      fi
      ;;
    *) die "GPU $index does not support MIG (mig.mode.current: $current); remove node.mig_profile" ;;
  esac
done

not_enabled=$(not_enabled_gpus)
if [[ -n $not_enabled && $enabling_needs_reset -eq 0 ]]; then
  die "MIG mode did not take effect on GPUs $not_enabled (compute capability $capability needs no reset; see the nvidia-smi output above)"
fi
if [[ -n $not_enabled ]]; then
  # Ampere, and the driver could not reset these GPUs itself. The nvidia-smi manual does not recommend GPU reset
  # for production; it happens here at most once per GPU (the mode then persists), at boot, on idle GPUs only.
  reboot_hint="reboot the node to finish enabling MIG on GPUs $not_enabled (setup runs again at boot)"
  users=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .) || true
  [[ $users -eq 0 ]] || die "$users processes use the GPUs, so they cannot be reset: $reboot_hint"
  for index in $not_enabled; do
    log "GPU $index: resetting it to make the pending MIG mode take effect"
    nvidia-smi -r -i "$index" || die "GPU $index reset failed: $reboot_hint"
  done
  still_pending=$(not_enabled_gpus)
  [[ -z $still_pending ]] || die "MIG mode is still pending on GPUs $still_pending: $reboot_hint"
fi

for line in "${modes[@]}"; do
  read -r index _ <<<"$line"
  # A profile row of the -lgip table reads "|   0  MIG 3g.20gb   9   2/2   19.62 ...": ID, then Free/Total.
  read -r profile_id free total < <(nvidia-smi mig -i "$index" -lgip |
    awk -v name="$profile" '$3 == "MIG" && $4 == name { split($6, count, "/"); print $5, count[1], count[2] }') ||
    die "GPU $index does not offer MIG profile $profile (see nvidia-smi mig -lgip)"
  if [[ $free -eq 0 ]]; then
    log "GPU $index: no room for more $profile instances; already configured"
    continue
  fi
  ids=$profile_id
  for ((created = 1; created < free; created++)); do ids+=",$profile_id"; done
  log "GPU $index: creating $free of $total $profile instances"
  nvidia-smi mig -i "$index" -cgi "$ids" -C
done
log "MIG profile $profile applied on ${#modes[@]} GPUs"
