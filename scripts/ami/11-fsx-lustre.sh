#!/usr/bin/env bash
# FSx for Lustre client at the pinned version, for the running (held) kernel: on Ubuntu the lustre-client-modules
# package of this kernel from AWS's FSx repository, on Amazon Linux 2 the lustre-client package of the extras topic
# that carries the pinned version (its kernel module comes with Amazon's kernel). Package names, repositories and
# the topic come from ami/packages.yaml.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION GPUFLEET_FSX_LUSTRE_VERSION GPUFLEET_FSX_LUSTRE_PACKAGE
package="$GPUFLEET_FSX_LUSTRE_PACKAGE"
already_at "FSx Lustre client" "$(installed_package_version "$package")" "$GPUFLEET_FSX_LUSTRE_VERSION" && exit 0

kernel="$(uname -r)"
add_repositories fsx_lustre
if is_ubuntu; then
  install_pinned "lustre-client-modules-$kernel" "$GPUFLEET_FSX_LUSTRE_VERSION" "$package" "$GPUFLEET_FSX_LUSTRE_VERSION"
else
  if [[ -n "${GPUFLEET_FSX_LUSTRE_EXTRAS_TOPIC:-}" ]]; then
    amazon-linux-extras enable "$GPUFLEET_FSX_LUSTRE_EXTRAS_TOPIC"
    yum clean metadata
  fi
  install_pinned "$package" "$GPUFLEET_FSX_LUSTRE_VERSION"
fi
log "FSx Lustre client $GPUFLEET_FSX_LUSTRE_VERSION installed for kernel $kernel"
