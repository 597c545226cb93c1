#!/usr/bin/env bash
# NVIDIA Fabric Manager at exactly the driver version, enabled at boot; only for NVSwitch systems (p4d, p4de,
# p5), where CUDA fails with error 802 without it.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_NVSWITCH
if [[ "$GPUFLEET_NVSWITCH" != 1 ]]; then
  log "target has no NVSwitch (GPUFLEET_NVSWITCH=$GPUFLEET_NVSWITCH): Fabric Manager not needed"
  exit 0
fi
require_env GPUFLEET_DRIVER_VERSION GPUFLEET_FABRIC_MANAGER_VERSION GPUFLEET_FABRIC_MANAGER_PACKAGE
[[ "$GPUFLEET_FABRIC_MANAGER_VERSION" == "$GPUFLEET_DRIVER_VERSION" ]] ||
  die "GPUFLEET_FABRIC_MANAGER_VERSION ($GPUFLEET_FABRIC_MANAGER_VERSION) must equal GPUFLEET_DRIVER_VERSION ($GPUFLEET_DRIVER_VERSION)"

# Named per OS family and driver branch in ami/packages.yaml (nvidia-fabricmanager-450 up to R575 on both
# families, nvidia-fabricmanager from NVIDIA's repository for R580 on Ubuntu).
package="$GPUFLEET_FABRIC_MANAGER_PACKAGE"
if ! already_at "$package" "$(installed_package_version "$package")" "$GPUFLEET_FABRIC_MANAGER_VERSION"; then
  if [[ -n "${GPUFLEET_FABRIC_MANAGER_URL:-}" ]]; then
    work="$(build_dir fabric-manager)"
    package_file="$work/$(basename "$GPUFLEET_FABRIC_MANAGER_URL")"
    download "$GPUFLEET_FABRIC_MANAGER_URL" "$package_file" "${GPUFLEET_FABRIC_MANAGER_SHA256:-}"
    install_packages "$package_file"
  else
    ensure_cuda_repository
    install_pinned "$package" "$GPUFLEET_FABRIC_MANAGER_VERSION"
  fi
  # Held like the kernel: a Fabric Manager that drifts from the driver version stops the NVSwitch fabric.
  if is_ubuntu; then apt-mark hold "$package"; else "$(amzn_package_manager)" versionlock add "$package"; fi
fi

if [[ "$(systemctl is-enabled "$FABRIC_MANAGER_SERVICE" 2>/dev/null || true)" == enabled ]]; then
  log "$FABRIC_MANAGER_SERVICE already enabled: nothing to do"
else
  systemctl enable "$FABRIC_MANAGER_SERVICE"
  log "$FABRIC_MANAGER_SERVICE enabled"
fi
