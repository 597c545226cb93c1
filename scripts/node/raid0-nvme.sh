#!/usr/bin/env bash
# Stripes every NVMe instance-store drive into one XFS scratch volume (a single drive is formatted as it is).
# Instance store is blank again after a stop/start, so this runs at every boot: mounted -> nothing to do;
# array on disk but not assembled (reboot) -> assemble and mount; blank drives -> create, format and mount.
set -euo pipefail

readonly INSTANCE_STORE_MODEL="Amazon EC2 NVMe Instance Storage"
readonly ARRAY=/dev/md/scratch

log() { echo "raid0-nvme: $*"; }
die() { echo "raid0-nvme: error: $*" >&2; exit 1; }

[[ ${GPUFLEET_RAID0_NVME:-} =~ ^[01]$ ]] || die "GPUFLEET_RAID0_NVME must be 1 or 0, got '${GPUFLEET_RAID0_NVME:-}'"
if [[ $GPUFLEET_RAID0_NVME == 0 ]]; then
  log "disabled (GPUFLEET_RAID0_NVME=0)"
  exit 0
fi
mount_point=${GPUFLEET_SCRATCH_MOUNT:?set GPUFLEET_SCRATCH_MOUNT to the scratch mount point, e.g. /scratch}
expected=${GPUFLEET_NVME_COUNT:?set GPUFLEET_NVME_COUNT to the number of instance-store drives}

if mountpoint -q "$mount_point"; then
  log "$mount_point is already mounted; nothing to do"
  exit 0
fi

# The model string tells instance store apart from EBS volumes (the root disk is NVMe too on Nitro).
mapfile -t drives < <(lsblk --nodeps --noheadings --output NAME,MODEL |
  awk -v model="$INSTANCE_STORE_MODEL" 'index($0, model) { print "/dev/" $1 }')
if [[ ${#drives[@]} -eq 0 ]]; then
  log "no NVMe instance-store drives found; no scratch volume"
  exit 0
fi
[[ ${#drives[@]} -eq $expected ]] ||
  die "found ${#drives[@]} instance-store drives (${drives[*]}), expected $expected; not touching them"

if [[ ${#drives[@]} -eq 1 ]]; then
  device=${drives[0]}
else
  device=$ARRAY
  if mdadm --detail "$device" >/dev/null 2>&1; then
    log "$device is already assembled"
  elif mdadm --examine "${drives[@]}" >/dev/null 2>&1; then
    log "assembling $device from ${drives[*]}"
    mdadm --assemble "$device" "${drives[@]}"
  else
    log "creating RAID0 $device over ${#drives[@]} drives: ${drives[*]}"
    mdadm --create "$device" --run --level=0 --raid-devices="${#drives[@]}" "${drives[@]}"
  fi
fi

filesystem=$(blkid --match-tag TYPE --output value "$device" || true)
case $filesystem in
  xfs) formatted=0 ;;
  "")
    log "formatting $device as XFS"
    mkfs.xfs -q "$device"
    formatted=1
    ;;
  *) die "$device already has a filesystem of type $filesystem; refusing to reformat it (wipe it with wipefs -a to reuse it)" ;;
esac

mkdir -p "$mount_point"
mount -o noatime "$device" "$mount_point"
# A fresh scratch volume is shared by every job user, like /tmp.
if [[ $formatted == 1 ]]; then
  chmod 1777 "$mount_point"
fi
log "mounted $device at $mount_point"
