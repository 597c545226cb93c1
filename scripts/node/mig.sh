#!/usr/bin/env bash
# Splits every GPU into as many MIG instances of GPUFLEET_MIG_PROFILE as fit (GPU and compute instances).
# MIG mode survives a reboot but the instances do not, so this runs at every boot; a GPU with no room left
# for the profile is left as it is.
set -euo pipefail

log() { echo "mig: $*"; }
die() { echo "mig: error: $*" >&2; exit 1; }

profile=${GPUFLEET_MIG_PROFILE:-}
if [[ -z $profile ]]; then
  log "disabled (GPUFLEET_MIG_PROFILE is empty)"
  exit 0
fi
expected=${GPUFLEET_GPU_COUNT:?set GPUFLEET_GPU_COUNT to the number of GPUs of the instance type}

# Prints "INDEX CURRENT PENDING" per GPU, e.g. "0 Enabled Enabled".
mig_modes() {
  nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv,noheader | tr -d ',' | grep .
}

mapfile -t modes < <(mig_modes)
[[ ${#modes[@]} -eq $expected ]] || die "nvidia-smi lists ${#modes[@]} GPUs, expected $expected"

not_enabled=()
for line in "${modes[@]}"; do
  read -r index current pending <<<"$line"
  case $current in
    Enabled) ;;
    Disabled)
      not_enabled+=("$index")
      [[ $pending == Enabled ]] || nvidia-smi -i "$index" -mig 1
      ;;
    *) die "GPU $index does not support MIG (mig.mode.current: $current); remove node.mig_profile" ;;
  esac
done

# Enabling MIG only takes effect after a GPU reset, which needs GPUs that no process is using.
if [[ ${#not_enabled[@]} -gt 0 ]]; then
  reboot_hint="reboot the node to finish enabling MIG on GPUs ${not_enabled[*]} (setup runs again at boot)"
  users=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .) || true
  [[ $users -eq 0 ]] || die "$users processes use the GPUs, so they cannot be reset: $reboot_hint"
  for index in "${not_enabled[@]}"; do
    log "resetting GPU $index to enable MIG mode"
    nvidia-smi -r -i "$index" || die "GPU $index reset failed: $reboot_hint"
  done
  still_disabled=$(mig_modes | awk '$2 != "Enabled" { print $1 }' | paste -sd ' ')
  [[ -z $still_disabled ]] || die "MIG mode is still pending on GPUs $still_disabled: $reboot_hint"
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
