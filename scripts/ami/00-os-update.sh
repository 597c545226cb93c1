#!/usr/bin/env bash
# Holds the running kernel (and the meta packages that would pull a newer one), then applies OS updates:
# the driver, EFA and Lustre modules are built for this kernel, so no update may replace it.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION
kernel="$(uname -r)"

# cloud-init's first boot updates packages in the background; every apt/yum step here would race it for the
# package lock. Wait for its boot-finished marker, as ParallelCluster's image build does
# (aws/aws-parallelcluster cli/src/pcluster/resources/imagebuilder/update_and_reboot.yaml, DisableUnattendedUpgrades).
readonly CLOUD_INIT_TIMEOUT=900 CLOUD_INIT_POLL=5
if [[ -d "$(root_path /var/lib/cloud)" ]]; then
  boot_finished="$(root_path /var/lib/cloud/instance/boot-finished)"
  waited=0
  until [[ -f "$boot_finished" ]]; do
    [[ $waited -lt $CLOUD_INIT_TIMEOUT ]] || die "cloud-init has not finished after ${CLOUD_INIT_TIMEOUT}s (no $boot_finished)"
    log "waiting for cloud-init to finish (${waited}s)"
    sleep "$CLOUD_INIT_POLL"
    waited=$((waited + CLOUD_INIT_POLL))
  done
fi

if is_ubuntu; then
  # apt-daily / apt-daily-upgrade (unattended-upgrade) take the dpkg lock at random times: wait for a running one
  # under their own lock (apt.systemd.daily's StateDir/daily_lock), then stop and disable them and switch the
  # periodic runs off, in the build and in the image whose packages are pinned (same source as above).
  daily_lock="$(root_path /var/lib/apt/daily_lock)"
  mkdir -p "$(dirname "$daily_lock")"
  flock "$daily_lock" systemctl disable --now apt-daily.timer apt-daily.service apt-daily-upgrade.timer \
    apt-daily-upgrade.service
  mkdir -p "$(root_path /etc/apt/apt.conf.d)"
  printf 'APT::Periodic::Update-Package-Lists "0";\nAPT::Periodic::Unattended-Upgrade "0";\n' \
    >"$(root_path /etc/apt/apt.conf.d/51gpufleet-no-periodic-apt)"

  held="$(apt-mark showhold)"
  to_hold=()
  for package in "linux-image-$kernel" "linux-headers-$kernel" "linux-modules-$kernel" \
    linux-aws linux-image-aws linux-headers-aws linux-modules-extra-aws; do
    [[ -n "$(installed_package_version "$package")" ]] || continue
    if grep -qx -- "$package" <<<"$held"; then log "$package already held"; else to_hold+=("$package"); fi
  done
  if [[ ${#to_hold[@]} -gt 0 ]]; then apt-mark hold "${to_hold[@]}"; fi
  apt_get update -q
  apt_get upgrade -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold
else
  manager="$(amzn_package_manager)"
  if [[ "$manager" == yum ]]; then install_packages yum-plugin-versionlock; else install_packages python3-dnf-plugin-versionlock; fi
  kernel_version="${kernel%.x86_64}"
  kernel_version="${kernel_version%.aarch64}"
  locked="$("$manager" versionlock list 2>/dev/null || true)"
  for package in kernel kernel-devel kernel-headers; do
    if grep -q -- "$package-[0-9:]*$kernel_version" <<<"$locked"; then
      log "$package-$kernel_version already locked"
    else
      "$manager" versionlock add "$package-$kernel_version"
    fi
  done
  "$manager" update -y -q
fi
log "OS updated; kernel $kernel held"
