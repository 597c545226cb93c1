#!/usr/bin/env bash
# aws-ofi-nccl, the NCCL net plugin for EFA, exactly once on the image. Without a URL the profile takes the copy
# the EFA installer put under /opt/amazon/ofi-nccl (installers >= 1.39 ship one; the gate checks the pinned
# version is the one it ships): it is checked and registered with the loader, nothing is built. With a URL the
# release is built against the libfabric it runs with (/opt/amazon/efa, aws-ofi-nccl #241), the installed NCCL
# and CUDA, into /opt/aws-ofi-nccl with a version marker that 17-validate.sh reads.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_AWS_OFI_NCCL_VERSION
version="$GPUFLEET_AWS_OFI_NCCL_VERSION"
# NCCL finds the plugin by name through the loader (no LD_LIBRARY_PATH needed); 17-validate.sh checks the result.
loader_conf="$(root_path /etc/ld.so.conf.d/gpufleet-aws-ofi-nccl.conf)"

if [[ -z "${GPUFLEET_AWS_OFI_NCCL_URL:-}" ]]; then
  mapfile -t plugins < <(nccl_net_plugins "$EFA_OFI_NCCL_PREFIX")
  [[ ${#plugins[@]} -eq 1 ]] || die "expected one $NCCL_NET_PLUGIN under $EFA_OFI_NCCL_PREFIX, found ${#plugins[@]}" \
    "(${plugins[*]:-none}): the profile takes aws-ofi-nccl from the EFA installer (no url), so pin an installer that" \
    "ships it (>= 1.39) or give components.aws_ofi_nccl.url"
  found="$(ofi_nccl_library_version "$(root_path "${plugins[0]}")")"
  version_matches "$found" "$version" ||
    die "the EFA installer's ${plugins[0]} is aws-ofi-nccl ${found:-of unknown version}, the profile pins $version"
  plugin_dir="$(dirname "${plugins[0]}")"
  if [[ -f "$loader_conf" && "$(<"$loader_conf")" == "$plugin_dir" ]]; then
    log "aws-ofi-nccl $found from the EFA installer already registered ($plugin_dir): nothing to do"
    exit 0
  fi
  printf '%s\n' "$plugin_dir" >"$loader_conf"
  ldconfig
  log "aws-ofi-nccl $found from the EFA installer registered with the loader: ${plugins[0]} (nothing built)"
  exit 0
fi

already_at aws-ofi-nccl "$(marker_version "$AWS_OFI_NCCL_PREFIX")" "$version" && exit 0
libfabric="$(root_path /opt/amazon/efa)"
[[ -f "$libfabric/include/rdma/fabric.h" ]] || die "libfabric not found under $libfabric: run 07-efa-installer.sh first"
mpi="$(root_path /opt/amazon/openmpi)"

source_dir="$(fetch_source aws-ofi-nccl "$GPUFLEET_AWS_OFI_NCCL_URL" "${GPUFLEET_AWS_OFI_NCCL_SHA256:-}")"
prefix="$(root_path "$AWS_OFI_NCCL_PREFIX")"
# From v1.7.0 configure also needs hwloc (CHECK_PKG_HWLOC, an error without it): 01-build-tools.sh installs it.
# --with-mpi: v1.1.1 adds the MPI include and lib directories; later releases find mpicc there (check_pkg_mpi.m4).
flags=(--prefix="$prefix" --with-libfabric="$libfabric" --with-cuda="$(root_path "$CUDA_LINK")" --with-mpi="$mpi")
# configure.ac knows --with-nccl up to v1.4.0; from v1.5.0 the plugin builds against NCCL headers it carries.
if version_before "$version" 1.5.0; then flags+=(--with-nccl="$(root_path "$(nccl_home)")"); fi
(
  cd "$source_dir"
  # Release tarballs ship configure; a tag archive from GitHub needs autogen.sh first.
  [[ -x configure ]] || ./autogen.sh
  if version_before "$version" 1.4.0; then
    # --disable-tests arrived in v1.4.0 (autoconf only warns about an unknown option): before it tests/ always
    # builds, with CC=mpicc (tests/Makefile.am) looked up on PATH, which sudo's secure_path leaves without it.
    [[ -x "$mpi/bin/mpicc" ]] ||
      die "no $mpi/bin/mpicc: aws-ofi-nccl $version builds its MPI tests; run 07-efa-installer.sh first"
    export PATH="$mpi/bin:$PATH"
  else
    flags+=(--disable-tests)
  fi
  ./configure "${flags[@]}"
  make -j "$(nproc)"
  make install
)
printf '%s/lib\n' "$AWS_OFI_NCCL_PREFIX" >"$loader_conf"
ldconfig
write_marker "$AWS_OFI_NCCL_PREFIX" "$version"
log "aws-ofi-nccl $version installed under $AWS_OFI_NCCL_PREFIX"
