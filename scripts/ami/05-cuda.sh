#!/usr/bin/env bash
# CUDA toolkit only (the driver is 02's) from the pinned runfile into /usr/local/cuda-X.Y, /usr/local/cuda
# pointing at it, its libraries on the loader path.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_CUDA_VERSION GPUFLEET_CUDA_URL
prefix="$(root_path "$(cuda_prefix)")"
link="$(root_path "$CUDA_LINK")"

found="$(installed_cuda_version)"
if [[ -n "$found" ]] && cuda_matches "$found" && [[ "$(readlink "$link")" == "$prefix" ]]; then
  log "CUDA $GPUFLEET_CUDA_VERSION already installed at $prefix: nothing to do"
  exit 0
fi

work="$(build_dir cuda)"
runfile="$work/cuda_$GPUFLEET_CUDA_VERSION.run"
download "$GPUFLEET_CUDA_URL" "$runfile" "${GPUFLEET_CUDA_SHA256:-}"
sh "$runfile" --toolkit --silent --override --toolkitpath="$prefix" --tmpdir="$work"
ln -sfn "$prefix" "$link"
printf '%s/lib64\n' "$CUDA_LINK" >"$(root_path /etc/ld.so.conf.d/gpufleet-cuda.conf)"
ldconfig
log "CUDA $GPUFLEET_CUDA_VERSION installed at $prefix"
