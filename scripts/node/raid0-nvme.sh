#!/usr/bin/env bash
# Stripes every NVMe instance-store drive into one XFS scratch volume (a single drive is formatted as it is).
# gpufleet-node-setup.service runs it at every boot, so it meets the drives in whatever state the instance's
# last life left them:
#   fresh launch, or started after a stop (instance store comes back empty): blank drives -> create, format, mount
#   rebooted, udev assembled the array (/dev/md/scratch, /dev/md/scratch_0 or only /dev/md127) -> mount it
#   rebooted, array not assembled -> assemble, mount
#   rebooted, udev left an inactive array holding some of the drives -> stop it, assemble, mount
#   already mounted -> nothing to do
# The array is found through its drives (the md device that holds them), not through a /dev/md/ name: udev
# names an array it assembles at boot after the name and homehost in its superblock, adding "_<n>" for an
# array it does not take as this host's (mdadm(8), --homehost and DEVICE NAMES). amazon-eks-ami's
# setup-local-disks (templates/al2023/runtime/bin/setup-local-disks, commit 81fec2e8) looks for
# /dev/md/<name>_* for the same reason; the drives' holders also cover an array known only as /dev/mdNNN.
# No mdadm.conf is written: after a stop/start it would describe an array that no longer exists
# (amazon-eks-ami #2755 had to work around exactly that).
# Optional: GPUFLEET_NVME_WAIT_SECONDS (default 30) to wait for all drives to show up; GPUFLEET_ROOT (tests)
# prefixes the /sys paths read.
set -euo pipefail
shopt -s nullglob
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

readonly INSTANCE_STORE_MODEL="Amazon EC2 NVMe Instance Storage"
readonly ARRAY=/dev/md/scratch
# mkfs.xfs(8) options, as amazon-eks-ami's setup-local-disks formats its array (file and commit above):
# -K skips discarding every block at mkfs time, which takes long on 8 x 3.8 TB (p5) and gains nothing: EC2 trims
# instance-store SSDs before it allocates them to an instance
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ssd-instance-store.html, "fully trimmed").
readonly MKFS_OPTIONS=(-q -K)
# -l su=8b: mkfs would take the array's stripe unit (mdadm's default chunk, 512 KiB) for the log too, which is
# over the 256 KiB maximum, so it warns and uses 32 KiB; 8 blocks of 4 KiB are those 32 KiB without the warning.
readonly ARRAY_MKFS_OPTIONS=(-l su=8b)
readonly MOUNT_OPTIONS=noatime
# A fresh scratch volume is shared by every job user, like /tmp.
readonly SCRATCH_MODE=1777

require_settings "$NODE_SETTINGS" GPUFLEET_RAID0_NVME
[[ $GPUFLEET_RAID0_NVME =~ ^[01]$ ]] || die "GPUFLEET_RAID0_NVME must be 1 or 0, got '$GPUFLEET_RAID0_NVME'"
if [[ $GPUFLEET_RAID0_NVME == 0 ]]; then
  log "disabled (GPUFLEET_RAID0_NVME=0)"
  exit 0
fi
require_settings "$NODE_SETTINGS" GPUFLEET_SCRATCH_MOUNT GPUFLEET_NVME_COUNT
mount_point=$GPUFLEET_SCRATCH_MOUNT
expected=$GPUFLEET_NVME_COUNT
wait_seconds=${GPUFLEET_NVME_WAIT_SECONDS:-30}
[[ $wait_seconds =~ ^[0-9]+$ ]] || die "GPUFLEET_NVME_WAIT_SECONDS must be a number of seconds, got '$wait_seconds'"
sysfs_block=${GPUFLEET_ROOT:-}/sys/class/block

if mountpoint -q "$mount_point"; then
  log "$mount_point is already mounted; nothing to do"
  exit 0
fi

# The model string tells instance store apart from EBS volumes (the root disk is NVMe too on Nitro).
instance_store_drives() {
  lsblk --nodeps --noheadings --output NAME,MODEL |
    awk -v model="$INSTANCE_STORE_MODEL" 'index($0, model) { print "/dev/" $1 }'
}

# udev assembles arrays from the drives it has seen (mdadm's udev-md-raid-assembly.rules); let it finish first so
# that it and this script do not both claim the drives. Drives still being probed get a short while to show up.
deadline=$((SECONDS + wait_seconds))
while true; do
  udevadm settle || log "udevadm settle timed out; going on with what is there now"
  mapfile -t drives < <(instance_store_drives)
  [[ ${#drives[@]} -lt $expected && $SECONDS -lt $deadline ]] || break
  log "found ${#drives[@]} of $expected instance-store drives; waiting for the rest"
  sleep 1
done
if [[ ${#drives[@]} -eq 0 ]]; then
  log "no NVMe instance-store drives found; no scratch volume"
  exit 0
fi
[[ ${#drives[@]} -eq $expected ]] ||
  die "found ${#drives[@]} instance-store drives (${drives[*]}), expected $expected; not touching them"

# The array over all the drives, if one is running, in running_array (its /dev/mdNNN name). An inactive array
# holding some of them (udev's assembly stopped short) is stopped so that they can be assembled again.
find_running_array() {
  local drive holder md state
  local -A held_drives=()
  running_array=""
  for drive in "${drives[@]}"; do
    # The kernel links /sys/class/block/<drive>/holders/<md> when it binds a drive to an array, running or not
    # (linux drivers/md/md.c, bind_rdev_to_array).
    for holder in "$sysfs_block/${drive#/dev/}/holders/"md*; do
      md=${holder##*/}
      held_drives[$md]=$((${held_drives[$md]:-0} + 1))
    done
  done
  for md in "${!held_drives[@]}"; do
    # array_state is "inactive" or one of the states of a running array (linux Documentation/admin-guide/md.rst).
    state=$(<"$sysfs_block/$md/md/array_state")
    if [[ $state == inactive ]]; then
      log "stopping /dev/$md: an inactive array holding ${held_drives[$md]} of the drives"
      mdadm --stop "/dev/$md"
    elif [[ ${held_drives[$md]} -eq ${#drives[@]} ]]; then
      running_array=/dev/$md
    else
      die "/dev/$md ($state) holds ${held_drives[$md]} of the ${#drives[@]} instance-store drives; not touching them"
    fi
  done
}

mkfs_options=("${MKFS_OPTIONS[@]}")
if [[ ${#drives[@]} -eq 1 ]]; then
  device=${drives[0]}
else
  mkfs_options+=("${ARRAY_MKFS_OPTIONS[@]}")
  find_running_array
  if [[ -n $running_array ]]; then
    device=$running_array
    log "$device is already assembled from ${drives[*]}"
  elif mdadm --examine "${drives[@]}" >/dev/null 2>&1; then
    device=$ARRAY
    log "assembling $device from ${drives[*]}"
    mdadm --assemble "$device" "${drives[@]}"
  else
    device=$ARRAY
    log "creating RAID0 $device over ${#drives[@]} drives: ${drives[*]}"
    # --homehost=any: udev takes the array as this host's whatever the host name at boot, and assembles it as
    # /dev/md/scratch (mdadm(8), --homehost).
    mdadm --create "$device" --run --homehost=any --level=0 --raid-devices="${#drives[@]}" "${drives[@]}"
  fi
fi

filesystem=$(blkid --match-tag TYPE --output value "$device" || true)
case $filesystem in
  xfs) formatted=0 ;;
  "")
    log "formatting $device as XFS"
    mkfs.xfs "${mkfs_options[@]}" "$device"
    formatted=1
    ;;
  *) die "$device already has a filesystem of type $filesystem; refusing to reformat it (wipe it with wipefs -a to reuse it)" ;;
esac

mkdir -p "$mount_point"
mount -o "$MOUNT_OPTIONS" "$device" "$mount_point"
# The mode belongs to the file system's root directory, so it is set once, on a new file system.
if [[ $formatted == 1 ]]; then
  chmod "$SCRATCH_MODE" "$mount_point"
fi
log "mounted $device at $mount_point"
