#!/usr/bin/env bash
# NCCL for the pinned CUDA: the pinned libnccl packages from the NVIDIA CUDA repository, or, when the profile
# gives a URL (the source tarball of the release tag), a source build installed under /opt/nccl. The source build
# compiles kernels only for GPUFLEET_CUDA_ARCHITECTURES (the target GPUs' compute capabilities, e.g. "80 90"), not
# for every architecture the CUDA release knows (makefiles/common.mk: "You should define NVCC_GENCODE in your
# environment to the minimal set of archs to reduce compile time").
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_CUDA_VERSION GPUFLEET_NCCL_VERSION
already_at NCCL "$(installed_nccl_version)" "$(first_fields "$GPUFLEET_NCCL_VERSION" 3)" && exit 0

cuda_mm="$(major_minor "$GPUFLEET_CUDA_VERSION")"
if [[ -n "${GPUFLEET_NCCL_URL:-}" ]]; then
  source_dir="$(fetch_source nccl "$GPUFLEET_NCCL_URL" "${GPUFLEET_NCCL_SHA256:-}")"
  prefix="$(root_path "$NCCL_SOURCE_PREFIX")"
  build_args=(src.build CUDA_HOME="$(root_path "$CUDA_LINK")")
  gencode=()
  for arch in ${GPUFLEET_CUDA_ARCHITECTURES:-}; do
    [[ "$arch" =~ ^[0-9]+$ ]] || die "GPUFLEET_CUDA_ARCHITECTURES: '$arch' is not a compute capability such as 80"
    gencode+=("-gencode=arch=compute_$arch,code=sm_$arch")
  done
  if [[ ${#gencode[@]} -gt 0 ]]; then
    build_args+=("NVCC_GENCODE=${gencode[*]}")
  else
    log "GPUFLEET_CUDA_ARCHITECTURES is empty: building NCCL for every architecture CUDA $cuda_mm knows"
  fi
  make -C "$source_dir" -j "$(nproc)" "${build_args[@]}"
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
