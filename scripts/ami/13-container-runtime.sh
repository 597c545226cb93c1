#!/usr/bin/env bash
# Docker with the NVIDIA Container Toolkit at the pinned version, registered as a Docker runtime so
# `docker run --gpus all` works on the nodes. Repositories and the runtime package come from ami/packages.yaml.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION GPUFLEET_CONTAINER_TOOLKIT_VERSION \
  GPUFLEET_CONTAINER_TOOLKIT_PACKAGE GPUFLEET_CONTAINER_TOOLKIT_REPOSITORIES
version="$GPUFLEET_CONTAINER_TOOLKIT_VERSION"
toolkit="$GPUFLEET_CONTAINER_TOOLKIT_PACKAGE"
# Before toolkit 1.6.0 the nvidia-container-runtime binary that daemon.json names is a package of its own
# (nvidia-container-runtime 3.4.0 with toolkit 1.3.0); from 1.6.0 it is part of the toolkit package and
# GPUFLEET_CONTAINER_RUNTIME_PACKAGE is empty.
runtime="${GPUFLEET_CONTAINER_RUNTIME_PACKAGE:-}"
runtime_version="${GPUFLEET_CONTAINER_RUNTIME_PACKAGE_VERSION:-}"
[[ -z "$runtime" || -n "$runtime_version" ]] ||
  die "GPUFLEET_CONTAINER_RUNTIME_PACKAGE_VERSION is empty: $runtime must be pinned (ami/packages.yaml)"
daemon_json="$(root_path /etc/docker/daemon.json)"
if version_matches "$(installed_package_version "$toolkit")" "$version" &&
  { [[ -z "$runtime" ]] || version_matches "$(installed_package_version "$runtime")" "$runtime_version"; } &&
  grep -q '"nvidia"' "$daemon_json" 2>/dev/null; then
  log "NVIDIA Container Toolkit already at $version and configured in Docker: nothing to do"
  exit 0
fi

# The libnvidia-container packages move in lockstep with the toolkit; pin them all so none floats ahead.
packages=(libnvidia-container1 "$version" libnvidia-container-tools "$version" "$toolkit" "$version")
if [[ "$(printf '%s\n' "$version" 1.11.0 | sort -V | head -n 1)" == 1.11.0 ]]; then
  packages=(nvidia-container-toolkit-base "$version" "${packages[@]}")
fi
if [[ -n "$runtime" ]]; then packages+=("$runtime" "$runtime_version"); fi
if is_ubuntu; then
  install_packages docker.io
else
  if [[ "$GPUFLEET_OS_VERSION" == 2 ]]; then amazon-linux-extras install -y docker; else install_packages docker; fi
fi
add_repositories container_toolkit
install_pinned "${packages[@]}"

if command -v nvidia-ctk >/dev/null; then
  nvidia-ctk runtime configure --runtime=docker
elif [[ ! -s "$daemon_json" ]]; then
  # Toolkits before nvidia-ctk (< 1.12): register the runtime by hand.
  command -v nvidia-container-runtime >/dev/null ||
    die "nvidia-container-runtime is not installed: daemon.json would name a missing runtime"
  mkdir -p "$(dirname "$daemon_json")"
  printf '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}\n' >"$daemon_json"
else
  die "$daemon_json exists without an nvidia runtime and this toolkit has no nvidia-ctk to merge it"
fi
systemctl enable docker
systemctl restart docker
log "Docker with NVIDIA Container Toolkit $version configured"
