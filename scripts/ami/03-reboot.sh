#!/usr/bin/env bash
# Reboot barrier: boots into the held kernel with the new driver loaded (nouveau blacklisted). The template
# runs this with expect_disconnect = true and pauses before the next step.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_DRIVER_VERSION

loaded_module="$(root_path /sys/module/nvidia/version)"
reasons=()
[[ -f "$(root_path /var/run/reboot-required)" ]] && reasons+=("the OS asks for a reboot")
if [[ ! -f "$loaded_module" ]]; then
  reasons+=("no NVIDIA module loaded")
elif [[ "$(<"$loaded_module")" != "$GPUFLEET_DRIVER_VERSION" ]]; then
  reasons+=("loaded NVIDIA module is $(<"$loaded_module"), want $GPUFLEET_DRIVER_VERSION")
fi
if [[ ${#reasons[@]} -eq 0 ]]; then
  log "NVIDIA $GPUFLEET_DRIVER_VERSION already loaded, no reboot pending: nothing to do"
  exit 0
fi
log "rebooting: ${reasons[*]}"
systemctl reboot
