#!/usr/bin/env bash
# AWS EFA installer, full install (kernel module with GPUDirect RDMA, libfabric under /opt/amazon/efa, Open MPI
# under /opt/amazon/openmpi). The tarball is checked against the profile's sha256 and, when
# GPUFLEET_EFA_INSTALLER_GPG_KEY_URL is set, against its detached signature (URL.sig) too, made by the key
# GPUFLEET_EFA_INSTALLER_GPG_KEY_FINGERPRINT when the profile pins one.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_EFA_INSTALLER_VERSION GPUFLEET_EFA_INSTALLER_URL
already_at "EFA installer" "$(installed_efa_installer_version)" "$GPUFLEET_EFA_INSTALLER_VERSION" && exit 0

work="$(build_dir efa-installer)"
tarball="$work/aws-efa-installer-$GPUFLEET_EFA_INSTALLER_VERSION.tar.gz"
download "$GPUFLEET_EFA_INSTALLER_URL" "$tarball" "${GPUFLEET_EFA_INSTALLER_SHA256:-}"
if [[ -n "${GPUFLEET_EFA_INSTALLER_GPG_KEY_URL:-}" ]]; then
  # The key comes over HTTPS from AWS; the signature binds the tarball to it.
  download "$GPUFLEET_EFA_INSTALLER_GPG_KEY_URL" "$work/efa-installer.key" ""
  download "$GPUFLEET_EFA_INSTALLER_URL.sig" "$tarball.sig" ""
  verify_signature "$tarball" "$tarball.sig" "$work/efa-installer.key" "${GPUFLEET_EFA_INSTALLER_GPG_KEY_FINGERPRINT:-}"
fi
installer_dir="$(extract_single_dir "$tarball" "$work/src")"

flags=(-y)
# Installers before 1.14.0 leave GPUDirect RDMA off unless asked.
if [[ "$(printf '%s\n' "$GPUFLEET_EFA_INSTALLER_VERSION" 1.14.0 | sort -V | head -n 1)" != 1.14.0 ]]; then
  flags+=(--enable-gdr)
fi
(cd "$installer_dir" && ./efa_installer.sh "${flags[@]}")
log "EFA installer $GPUFLEET_EFA_INSTALLER_VERSION installed (${flags[*]})"
