#!/usr/bin/env bash
# cuDNN for the pinned CUDA: from the profile's tarball into /usr/local/cuda when it gives a URL, otherwise the
# pinned libcudnn packages from the NVIDIA CUDA repository.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_CUDA_VERSION GPUFLEET_CUDNN_VERSION
# Headers carry major.minor.patch only: 8.0.5.39 is checked as 8.0.5.
already_at cuDNN "$(installed_cudnn_version)" "$(first_fields "$GPUFLEET_CUDNN_VERSION" 3)" && exit 0

cuda_mm="$(major_minor "$GPUFLEET_CUDA_VERSION")"
if [[ -n "${GPUFLEET_CUDNN_URL:-}" ]]; then
  unpacked="$(fetch_source cudnn "$GPUFLEET_CUDNN_URL" "${GPUFLEET_CUDNN_SHA256:-}")"
  cuda="$(root_path "$CUDA_LINK")"
  cp -P "$unpacked"/include/cudnn*.h "$cuda/include/"
  lib_dir="$unpacked/lib64"
  [[ -d "$lib_dir" ]] || lib_dir="$unpacked/lib"
  cp -P "$lib_dir"/libcudnn* "$cuda/lib64/"
  chmod a+r "$cuda"/include/cudnn*.h "$cuda"/lib64/libcudnn*
  ldconfig
else
  # Names and repository version strings from ami/packages.yaml: "8.0.5.39-1+cuda11.0" in the debs,
  # "8.0.5.39-1.cuda11.0" in the RPMs; on Ubuntu 18.04 also NVIDIA's machine-learning repository.
  require_env GPUFLEET_CUDNN_PACKAGE GPUFLEET_CUDNN_PACKAGE_VERSION GPUFLEET_CUDNN_DEV_PACKAGE \
    GPUFLEET_CUDNN_DEV_PACKAGE_VERSION
  ensure_cuda_repository
  add_repositories cudnn
  install_pinned "$GPUFLEET_CUDNN_PACKAGE" "$GPUFLEET_CUDNN_PACKAGE_VERSION" \
    "$GPUFLEET_CUDNN_DEV_PACKAGE" "$GPUFLEET_CUDNN_DEV_PACKAGE_VERSION"
fi
log "cuDNN $GPUFLEET_CUDNN_VERSION installed for CUDA $cuda_mm"
