#!/usr/bin/env bash
# NVIDIA driver from the pinned runfile, registered with DKMS so its module is rebuilt for any new kernel.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_DRIVER_VERSION GPUFLEET_DRIVER_URL

# modinfo reads the installed module, so this works before the reboot and on instances without a GPU.
installed="$(modinfo -F version nvidia 2>/dev/null || true)"
already_at "NVIDIA driver" "$installed" "$GPUFLEET_DRIVER_VERSION" && exit 0
[[ -z "$installed" ]] || log "replacing NVIDIA driver $installed with $GPUFLEET_DRIVER_VERSION"

work="$(build_dir nvidia-driver)"
runfile="$work/NVIDIA-Linux-$GPUFLEET_DRIVER_VERSION.run"
download "$GPUFLEET_DRIVER_URL" "$runfile" "${GPUFLEET_DRIVER_SHA256:-}"
sh "$runfile" --silent --dkms --disable-nouveau --no-cc-version-check
log "NVIDIA driver $GPUFLEET_DRIVER_VERSION installed"
