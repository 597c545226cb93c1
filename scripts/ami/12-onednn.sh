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
"$cmake_bin" -S "$source_dir" -B "$source_dir/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DDNNL_BUILD_TESTS=OFF -DDNNL_BUILD_EXAMPLES=OFF
"$cmake_bin" --build "$source_dir/build" --parallel "$(nproc)"
"$cmake_bin" --install "$source_dir/build"
printf '%s/lib\n%s/lib64\n' "$ONEDNN_PREFIX" "$ONEDNN_PREFIX" >"$(root_path /etc/ld.so.conf.d/gpufleet-onednn.conf)"
ldconfig
log "oneDNN $GPUFLEET_ONEDNN_VERSION installed under $ONEDNN_PREFIX"
