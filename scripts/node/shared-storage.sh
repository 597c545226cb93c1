#!/usr/bin/env bash
# Mounts the environment's shared FSx for Lustre file system at GPUFLEET_SHARED_DIR, the place for checkpoints and
# anything every node must see. gpufleet-node-setup.service runs it at every boot (nothing goes into /etc/fstab: a
# mount that fails there can hang the boot, FSx for Lustre user guide, troubleshooting "Automatic Mounting Fails and
# the Instance Is Unresponsive"); a mount already there is left alone.
# The mount source (DNS_NAME@tcp:/MOUNT_NAME) is the node tag GPUFLEET_SHARED_STORAGE_TAG, read from the instance
# metadata (IMDSv2, tags/instance/KEY; the launch template allows tags in the metadata): a new file system's DNS and
# mount names exist only once its stack is deployed, after the user data was compressed at synthesis.
# The mount is the one the FSx for Lustre user guide gives (mounting-ec2-instance.html):
#   mount -t lustre -o relatime,flock DNS_NAME@tcp:/MOUNT_NAME DIR
# It fails with one line naming the file system and what to check when the mount does not succeed in 3 tries
# (right after boot the network can still be coming up), so node setup fails.
# A new file system's root is root's with mode 755 (unconfirmed for FSx); it is made 1777, like /tmp and /scratch,
# so that every user can write there; any other mode an administrator set is kept.
# Optional: GPUFLEET_IMDS_URL, GPUFLEET_SHARED_MOUNT_RETRY_SECONDS (10).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

# The guide's options, and nosuid,nodev: auto-import takes owners and modes from S3 object metadata (FSx for Lustre
# user guide, posix-metadata-support.html), which anyone who may write the data prefix sets; setuid is not imported,
# setgid and device files are not said to be refused (unconfirmed), so the kernel ignores both on this mount.
readonly MOUNT_OPTIONS=relatime,flock,nosuid,nodev
readonly SHARED_MODE=1777

require_settings "$NODE_SETTINGS" GPUFLEET_SHARED_DIR GPUFLEET_SHARED_STORAGE_TAG
dir=$GPUFLEET_SHARED_DIR
tag=$GPUFLEET_SHARED_STORAGE_TAG
attempts=3
pause=${GPUFLEET_SHARED_MOUNT_RETRY_SECONDS:-10}
[[ $pause =~ ^[0-9]+$ ]] || die "GPUFLEET_SHARED_MOUNT_RETRY_SECONDS must be a number of seconds, got '$pause'"

# The data folder the data repository association links (GPUFLEET_SHARED_DATA_DIR, MOUNT/data), which FSx makes when
# the association is created, root's with mode 755 (unconfirmed): made 1777 like the root, so that every user can
# write data and checkpoints there. Only a folder of root's with that mode and no link: the root is writable by every
# user, who could have put a folder or a link of their own there first, and an entry of root's in the sticky root can
# be renamed or removed by root alone, so it cannot change between the check and the chmod.
open_data_dir() {
  local data=${GPUFLEET_SHARED_DATA_DIR:-}
  [[ -n $data && $data != "$dir" ]] || return 0
  if [[ -d $data && ! -L $data && $(stat -c '%u %a' "$data") == "0 755" ]]; then
    chmod "$SHARED_MODE" "$data"
    log "made $data writable by every user (1777)"
  fi
}

if mountpoint -q "$dir"; then
  open_data_dir
  log "$dir is already mounted; nothing to do"
  exit 0
fi
# mount -t lustre runs mount.lustre (lustre-client-utils on Ubuntu, lustre-client on Amazon Linux).
command -v mount.lustre >/dev/null || die "no Lustre client (mount.lustre) on this image"

token=$(imds_token) || die "no IMDSv2 token from $IMDS_URL"
reply=$(curl -sS --max-time 2 -H "X-aws-ec2-metadata-token: $token" -w '\n%{http_code}' \
  "$IMDS_URL/latest/meta-data/tags/instance/$tag") || die "no instance metadata at $IMDS_URL"
source=${reply%$'\n'*} status=${reply##*$'\n'}
[[ $status == 200 && $source =~ ^[A-Za-z0-9.-]+@tcp:/[A-Za-z0-9_-]{1,8}$ ]] ||
  die "instance tag $tag holds no Lustre mount source (HTTP $status)"

mkdir -p "$dir"
# The ports: FSx for Lustre user guide, limit-access-security-groups.html.
until mount -t lustre -o "$MOUNT_OPTIONS" "$source" "$dir"; do
  ((--attempts > 0)) || die "cannot mount $source at $dir (is the file system available, TCP 988 and 1018-1023 open?)"
  log "retrying in ${pause}s"
  sleep "$pause"
done
[[ $(stat -c %a "$dir") != 755 ]] || chmod "$SHARED_MODE" "$dir"
open_data_dir
log "mounted $source at $dir"
