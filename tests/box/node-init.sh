#!/usr/bin/env bash
# The first process of a box node (tests/box/nodes.py starts it with unshare --pid --fork --mount --uts --ipc --cgroup
# inside the node's network namespace, in the node's own cgroup): builds the node's root, then becomes systemd, PID 1.
# The steps and the reasons for each are ../shared/reference/nodes-in-a-box.md's:
# - an overlay of the cached root file system and the box's image layer (read-only) under the node's own upper
#   directory, so nodes share nothing they write;
# - a tmpfs /dev with the usual device nodes bound from the host and a private devpts;
# - the shared directory bound at the shared mount point (the FSx for Lustre stand-in), before pivot_root;
# - its own host name, machine id and boot id;
# - a fresh proc, /proc/sys read-only but for /proc/sys/net (each node's systemd-sysctl would otherwise change the
#   host's kernel settings), sysfs read-only, and a cgroup2 tree rooted at the node's cgroup;
# - /sys/hypervisor/uuid starting with "ec2", the one sign cloud-init 22.4's identify_aws() finds without DMI
#   (cloudinit/sources/DataSourceEc2.py: `uuid.startswith("ec2")` on /sys/hypervisor/uuid), so it takes the node for
#   AWS and asks the metadata service with IMDSv2 tokens, as on EC2.
# Settings: BOX_LOWER (overlay lower directories, colon-separated), BOX_NODE_DIR, BOX_HOSTNAME, BOX_SHARED_DIR,
# BOX_SHARED_MOUNT, BOX_SCRATCH_MOUNT, BOX_SYSTEM_UUID.
set -euo pipefail

node=$BOX_NODE_DIR
root=$node/root
mount --make-rprivate /
mkdir -p "$node/upper" "$node/work" "$root"
mount -t overlay overlay -o "lowerdir=$BOX_LOWER,upperdir=$node/upper,workdir=$node/work" "$root"

mount -t tmpfs -o mode=755,nosuid tmpfs "$root/dev"
for device in null zero full random urandom tty; do
  touch "$root/dev/$device"
  mount --bind "/dev/$device" "$root/dev/$device"
done
mkdir -p "$root/dev/pts" "$root/dev/shm" "$root/dev/mqueue"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
ln -s /proc/self/fd "$root/dev/fd"
for stream in stdin:0 stdout:1 stderr:2; do
  ln -s "/proc/self/fd/${stream#*:}" "$root/dev/${stream%%:*}"
done

mkdir -p "$root$BOX_SHARED_MOUNT"
mount --bind "$BOX_SHARED_DIR" "$root$BOX_SHARED_MOUNT"
# The instance store's RAID0 stand-in: a directory of the node's own at the scratch mount point (raid0-nvme.sh finds
# it mounted and leaves it). The box can make no block devices: md arrays and loop devices are the host kernel's.
mkdir -p "$node/scratch" "$root$BOX_SCRATCH_MOUNT"
chmod 1777 "$node/scratch"
mount --bind "$node/scratch" "$root$BOX_SCRATCH_MOUNT"

hostname "$BOX_HOSTNAME"
echo "$BOX_HOSTNAME" >"$root/etc/hostname"
tr -d - </proc/sys/kernel/random/uuid >"$root/etc/machine-id"
cat /proc/sys/kernel/random/uuid >"$node/boot_id"
echo "$BOX_SYSTEM_UUID" >"$node/hypervisor-uuid"

mkdir -p "$root/.host"
cd "$root"
pivot_root . .host
mount -t proc -o nosuid,nodev,noexec proc /proc
mount --bind /proc/sys /proc/sys
mount --bind "/.host$node/boot_id" /proc/sys/kernel/random/boot_id
mount --bind /proc/sys/net /proc/sys/net
mount -o remount,bind,ro /proc/sys
# /sys: a read-only tmpfs holding sysfs's directories, bound one by one, and hypervisor/uuid (this host's sysfs has
# no hypervisor directory, and nothing can be created in sysfs).
sysfs=/.sysfs
mkdir "$sysfs"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$sysfs"
mount -t tmpfs -o mode=755,nosuid,nodev,noexec tmpfs /sys
for entry in "$sysfs"/*; do
  mkdir "/sys/${entry##*/}"
  mount --bind "$entry" "/sys/${entry##*/}"
done
mkdir -p /sys/hypervisor
cp "/.host$node/hypervisor-uuid" /sys/hypervisor/uuid
mount -o remount,ro /sys
umount "$sysfs"
rmdir "$sysfs"
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
umount -l /.host
rmdir /.host

export container=other
exec /sbin/init systemd.unified_cgroup_hierarchy=1 </dev/null
