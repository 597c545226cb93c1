#!/usr/bin/env bash
# FSx for Lustre client at the pinned version, for the running (held) kernel: on Ubuntu the
# lustre-client-modules package of this kernel from AWS's FSx repository, on Amazon Linux from its own repos.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION GPUFLEET_FSX_LUSTRE_VERSION
package="$(fsx_lustre_package)"
already_at "FSx Lustre client" "$(installed_package_version "$package")" "$GPUFLEET_FSX_LUSTRE_VERSION" && exit 0

kernel="$(uname -r)"
if is_ubuntu; then
  case "$GPUFLEET_OS_VERSION" in
    18.04) suite=bionic ;;
    20.04) suite=focal ;;
    22.04) suite=jammy ;;
    *) die "no FSx Lustre client repository known for Ubuntu $GPUFLEET_OS_VERSION" ;;
  esac
  add_apt_repository gpufleet-fsx-lustre \
    https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc \
    "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu $suite main"
  install_pinned "lustre-client-modules-$kernel" "$GPUFLEET_FSX_LUSTRE_VERSION" \
    "$package" "$GPUFLEET_FSX_LUSTRE_VERSION"
elif [[ "$GPUFLEET_OS_VERSION" == 2 ]]; then
  amazon-linux-extras enable lustre
  yum clean metadata
  install_pinned kmod-lustre-client "$GPUFLEET_FSX_LUSTRE_VERSION" "$package" "$GPUFLEET_FSX_LUSTRE_VERSION"
else
  install_pinned "$package" "$GPUFLEET_FSX_LUSTRE_VERSION"
fi
log "FSx Lustre client $GPUFLEET_FSX_LUSTRE_VERSION installed for kernel $kernel"
