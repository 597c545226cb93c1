#!/usr/bin/env bash
# Intel oneDNN (CPU kernels for frameworks' data loading and inference paths), built at the pinned release from
# its source tarball and installed under /opt/onednn.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_ONEDNN_VERSION GPUFLEET_ONEDNN_URL
already_at oneDNN "$(installed_onednn_version)" "$(first_fields "$GPUFLEET_ONEDNN_VERSION" 3)" && exit 0

source_dir="$(fetch_source onednn "$GPUFLEET_ONEDNN_URL" "${GPUFLEET_ONEDNN_SHA256:-}")"
cmake_bin=cmake
command -v cmake >/dev/null || cmake_bin=cmake3 # Amazon Linux 2 ships CMake 3 as cmake3
prefix="$(root_path "$ONEDNN_PREFIX")"
# Configured from inside the build directory and built with make, which every CMake 3 supports: -S/-B (CMake
# 3.13), --build --parallel (3.12) and --install (3.15; CMake release notes) are newer than Ubuntu 18.04's CMake
# 3.10.2 (packages.ubuntu.com/bionic/cmake).
mkdir -p "$source_dir/build"
(
  cd "$source_dir/build"
  "$cmake_bin" "$source_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DDNNL_BUILD_TESTS=OFF \
    -DDNNL_BUILD_EXAMPLES=OFF
  make -j "$(nproc)"
  make install
)
printf '%s/lib\n%s/lib64\n' "$ONEDNN_PREFIX" "$ONEDNN_PREFIX" >"$(root_path /etc/ld.so.conf.d/gpufleet-onednn.conf)"
ldconfig
log "oneDNN $GPUFLEET_ONEDNN_VERSION installed under $ONEDNN_PREFIX"
