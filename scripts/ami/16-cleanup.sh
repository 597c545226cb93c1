#!/usr/bin/env bash
# Leaves nothing of the build machine in the image: package caches, build trees, logs, SSH host keys,
# machine-id and cloud-init state (so every node gets its own), shell history.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION
empty_dir() { if [[ -d "$1" ]]; then find "$1" -mindepth 1 -delete; fi; }

if is_ubuntu; then
  apt-get clean
  empty_dir "$(root_path /var/lib/apt/lists)"
else
  "$(amzn_package_manager)" clean all
  rm -rf "$(root_path /var/cache/yum)" "$(root_path /var/cache/dnf)"
fi
rm -rf "$(root_path "$GPUFLEET_BUILD_DIR")"
if [[ -d "$(root_path /var/log)" ]]; then
  find "$(root_path /var/log)" -type f \( -name '*.gz' -o -name '*.[0-9]' -o -name '*.old' \) -delete
  find "$(root_path /var/log)" -type f -exec truncate -s 0 {} +
fi
rm -f "$(root_path /etc/ssh)"/ssh_host_*
# An empty machine-id (not a missing one) makes systemd generate a fresh one on first boot.
if [[ -f "$(root_path /etc/machine-id)" ]]; then : >"$(root_path /etc/machine-id)"; fi
rm -f "$(root_path /var/lib/dbus/machine-id)"
# What `cloud-init clean` removes: without its state, cloud-init runs afresh on each node's first boot.
empty_dir "$(root_path /var/lib/cloud)"
rm -f "$(root_path /root/.bash_history)" "$(root_path /home)"/*/.bash_history
log "build leftovers removed"
