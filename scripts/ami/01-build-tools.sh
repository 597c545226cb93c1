#!/usr/bin/env bash
# Compilers and tools the later steps build with: DKMS modules (driver, EFA, Lustre) need the headers of the
# running kernel; aws-ofi-nccl needs autotools, and hwloc from v1.7.0 (configure.ac CHECK_PKG_HWLOC fails without
# it; its README names hwloc-devel for RPM and libhwloc-dev for DPKG distributions); oneDNN needs cmake; the AWS CLI
# installer is a zip (unzip). python3 reads /etc/gpufleet/versions.json for the node scripts (efa-env.sh) and runs
# the node's topology check: Ubuntu has it, an Amazon Linux 2 base may not.
# python3-venv and python3-pip on Ubuntu: a run's --setup makes a virtualenv and installs its packages into it
# (docs/guides/elastic-training.md), and Debian and Ubuntu leave ensurepip out of python3 ("ensurepip is not available.
# On Debian/Ubuntu systems, you need to install the python3-venv package", python3 -m venv's own message, seen on a box
# node, tests/box); Amazon Linux's python3 carries venv and ensurepip itself (unconfirmed).
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION
kernel="$(uname -r)"

if is_ubuntu; then
  packages=(build-essential gcc make dkms "linux-headers-$kernel" autoconf automake libtool libhwloc-dev git jq cmake
    curl ca-certificates gnupg pciutils python3 python3-venv python3-pip unzip)
else
  kernel_version="${kernel%.x86_64}"
  kernel_version="${kernel_version%.aarch64}"
  packages=(gcc gcc-c++ make dkms "kernel-devel-$kernel_version" "kernel-headers-$kernel_version" autoconf automake
    libtool hwloc-devel git jq cmake3 curl gnupg2 pciutils tar gzip python3 unzip)
  [[ "$GPUFLEET_OS_VERSION" == 2 ]] || packages=("${packages[@]/cmake3/cmake}")
fi
missing=()
for package in "${packages[@]}"; do
  [[ -n "$(installed_package_version "$package")" ]] || missing+=("$package")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  log "build tools already installed: nothing to do"
  exit 0
fi
if is_ubuntu; then
  apt_get update -q
elif [[ "$GPUFLEET_OS_VERSION" == 2 ]]; then
  amazon-linux-extras install -y epel # dkms comes from EPEL on Amazon Linux 2
fi
install_packages "${missing[@]}"
if is_ubuntu; then apt-mark hold "linux-headers-$kernel"; fi
log "build tools installed: ${missing[*]}"
