#!/usr/bin/env bash
# Holds the running kernel (and the meta packages that would pull a newer one), then applies OS updates:
# the driver, EFA and Lustre modules are built for this kernel, so no update may replace it.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION
kernel="$(uname -r)"

if is_ubuntu; then
  held="$(apt-mark showhold)"
  to_hold=()
  for package in "linux-image-$kernel" "linux-headers-$kernel" "linux-modules-$kernel" \
    linux-aws linux-image-aws linux-headers-aws linux-modules-extra-aws; do
    [[ -n "$(installed_package_version "$package")" ]] || continue
    if grep -qx -- "$package" <<<"$held"; then log "$package already held"; else to_hold+=("$package"); fi
  done
  if [[ ${#to_hold[@]} -gt 0 ]]; then apt-mark hold "${to_hold[@]}"; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get upgrade -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold
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
