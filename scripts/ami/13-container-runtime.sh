#!/usr/bin/env bash
# Docker with the NVIDIA Container Toolkit at the pinned version, registered as a Docker runtime so
# `docker run --gpus all` works on the nodes.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION GPUFLEET_CONTAINER_TOOLKIT_VERSION
version="$GPUFLEET_CONTAINER_TOOLKIT_VERSION"
daemon_json="$(root_path /etc/docker/daemon.json)"
if version_matches "$(installed_package_version nvidia-container-toolkit)" "$version" &&
  grep -q '"nvidia"' "$daemon_json" 2>/dev/null; then
  log "NVIDIA Container Toolkit already at $version and configured in Docker: nothing to do"
  exit 0
fi

# The libnvidia-container packages move in lockstep with the toolkit; pin them all so none floats ahead.
packages=(libnvidia-container1 "$version" libnvidia-container-tools "$version" nvidia-container-toolkit "$version")
if [[ "$(printf '%s\n' "$version" 1.11.0 | sort -V | head -n 1)" == 1.11.0 ]]; then
  packages=(nvidia-container-toolkit-base "$version" "${packages[@]}")
fi
if is_ubuntu; then
  install_packages docker.io
  add_apt_repository gpufleet-nvidia-container-toolkit https://nvidia.github.io/libnvidia-container/gpgkey \
    "https://nvidia.github.io/libnvidia-container/stable/deb/\$(ARCH) /"
else
  if [[ "$GPUFLEET_OS_VERSION" == 2 ]]; then amazon-linux-extras install -y docker; else install_packages docker; fi
  add_yum_repository https://nvidia.github.io/libnvidia-container/stable/rpm/nvidia-container-toolkit.repo
fi
install_pinned "${packages[@]}"

if command -v nvidia-ctk >/dev/null; then
  nvidia-ctk runtime configure --runtime=docker
elif [[ ! -s "$daemon_json" ]]; then
  # Toolkits before nvidia-ctk (< 1.12): register the runtime by hand.
  mkdir -p "$(dirname "$daemon_json")"
  printf '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}\n' >"$daemon_json"
else
  die "$daemon_json exists without an nvidia runtime and this toolkit has no nvidia-ctk to merge it"
fi
systemctl enable docker
systemctl restart docker
log "Docker with NVIDIA Container Toolkit $version configured"
