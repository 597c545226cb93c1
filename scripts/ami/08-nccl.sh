#!/usr/bin/env bash
# NCCL for the pinned CUDA: the pinned libnccl packages from the NVIDIA CUDA repository, or, when the profile
# gives a URL (the source tarball of the release tag), a source build installed under /opt/nccl.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_CUDA_VERSION GPUFLEET_NCCL_VERSION
already_at NCCL "$(installed_nccl_version)" "$(first_fields "$GPUFLEET_NCCL_VERSION" 3)" && exit 0

cuda_mm="$(major_minor "$GPUFLEET_CUDA_VERSION")"
if [[ -n "${GPUFLEET_NCCL_URL:-}" ]]; then
  source_dir="$(fetch_source nccl "$GPUFLEET_NCCL_URL" "${GPUFLEET_NCCL_SHA256:-}")"
  prefix="$(root_path "$NCCL_SOURCE_PREFIX")"
  make -C "$source_dir" -j "$(nproc)" src.build CUDA_HOME="$(root_path "$CUDA_LINK")"
  make -C "$source_dir" install PREFIX="$prefix"
  printf '%s/lib\n' "$NCCL_SOURCE_PREFIX" >"$(root_path /etc/ld.so.conf.d/gpufleet-nccl.conf)"
  ldconfig
else
  ensure_cuda_repository
  version="$(package_version_string "$GPUFLEET_NCCL_VERSION")+cuda$cuda_mm"
  if is_ubuntu; then
    install_pinned libnccl2 "$version" libnccl-dev "$version"
  else
    install_pinned libnccl "$version" libnccl-devel "$version"
  fi
fi
log "NCCL $GPUFLEET_NCCL_VERSION installed for CUDA $cuda_mm"
