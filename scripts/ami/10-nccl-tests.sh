#!/usr/bin/env bash
# nccl-tests from the release tag's tarball, built with MPI (the EFA installer's Open MPI) into
# /opt/nccl-tests/build, so a fresh cluster can run all_reduce_perf across nodes straight away.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_NCCL_TESTS_VERSION GPUFLEET_NCCL_TESTS_URL
already_at nccl-tests "$(marker_version "$NCCL_TESTS_PREFIX")" "$GPUFLEET_NCCL_TESTS_VERSION" && exit 0

mpi="$(root_path /opt/amazon/openmpi)"
[[ -x "$mpi/bin/mpicc" ]] || die "Open MPI not found under $mpi: run 07-efa-installer.sh first"

source_dir="$(fetch_source nccl-tests "$GPUFLEET_NCCL_TESTS_URL" "${GPUFLEET_NCCL_TESTS_SHA256:-}")"
prefix="$(root_path "$NCCL_TESTS_PREFIX")"
mkdir -p "$prefix"
make -C "$source_dir" -j "$(nproc)" MPI=1 MPI_HOME="$mpi" CUDA_HOME="$(root_path "$CUDA_LINK")" \
  NCCL_HOME="$(root_path "$(nccl_home)")" BUILDDIR="$prefix/build"
for binary in "${NCCL_TESTS_BINARIES[@]}"; do
  [[ -x "$prefix/build/$binary" ]] || die "nccl-tests build did not produce $prefix/build/$binary"
done
write_marker "$NCCL_TESTS_PREFIX" "$GPUFLEET_NCCL_TESTS_VERSION"
log "nccl-tests $GPUFLEET_NCCL_TESTS_VERSION built into $NCCL_TESTS_PREFIX/build"
