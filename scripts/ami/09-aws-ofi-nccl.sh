#!/usr/bin/env bash
# aws-ofi-nccl (the NCCL net plugin for EFA) from its release tarball, built against the libfabric it runs
# with (/opt/amazon/efa, aws-ofi-nccl #241), the installed NCCL and CUDA; installed under /opt/aws-ofi-nccl
# with a version marker that 15-validate.sh and the node scripts read.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_AWS_OFI_NCCL_VERSION GPUFLEET_AWS_OFI_NCCL_URL
already_at aws-ofi-nccl "$(marker_version "$AWS_OFI_NCCL_PREFIX")" "$GPUFLEET_AWS_OFI_NCCL_VERSION" && exit 0

libfabric="$(root_path /opt/amazon/efa)"
[[ -f "$libfabric/include/rdma/fabric.h" ]] || die "libfabric not found under $libfabric: run 07-efa-installer.sh first"

source_dir="$(fetch_source aws-ofi-nccl "$GPUFLEET_AWS_OFI_NCCL_URL" "${GPUFLEET_AWS_OFI_NCCL_SHA256:-}")"
prefix="$(root_path "$AWS_OFI_NCCL_PREFIX")"
(
  cd "$source_dir"
  # Release tarballs ship configure; a tag archive from GitHub needs autogen.sh first.
  [[ -x configure ]] || ./autogen.sh
  # --with-mpi only matters to plugin releases that still build their MPI tests; newer ones ignore it.
  ./configure --prefix="$prefix" --with-libfabric="$libfabric" --with-cuda="$(root_path "$CUDA_LINK")" \
    --with-nccl="$(root_path "$(nccl_home)")" --with-mpi="$(root_path /opt/amazon/openmpi)" --disable-tests
  make -j "$(nproc)"
  make install
)
printf '%s/lib\n' "$AWS_OFI_NCCL_PREFIX" >"$(root_path /etc/ld.so.conf.d/gpufleet-aws-ofi-nccl.conf)"
ldconfig
write_marker "$AWS_OFI_NCCL_PREFIX" "$GPUFLEET_AWS_OFI_NCCL_VERSION"
log "aws-ofi-nccl $GPUFLEET_AWS_OFI_NCCL_VERSION installed under $AWS_OFI_NCCL_PREFIX"
