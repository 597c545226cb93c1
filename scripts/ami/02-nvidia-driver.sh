#!/usr/bin/env bash
# NVIDIA driver from the pinned runfile, registered with DKMS so its module is rebuilt for any new kernel.
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_DRIVER_VERSION GPUFLEET_DRIVER_URL

# modinfo reads the installed module, so this works before the reboot and on instances without a GPU.
installed="$(modinfo -F version nvidia 2>/dev/null || true)"
already_at "NVIDIA driver" "$installed" "$GPUFLEET_DRIVER_VERSION" && exit 0
[[ -z "$installed" ]] || log "replacing NVIDIA driver $installed with $GPUFLEET_DRIVER_VERSION"

# The kernel module must be built by the compiler that built the kernel. Ubuntu 22.04's 6.8 kernels are built
# with gcc-12 while build-essential's gcc is 11; /proc/version then names it ("x86_64-linux-gnu-gcc-12 ..."), so
# install that gcc and build with it (aws/aws-parallelcluster-cookbook PR #2852: CC=/usr/bin/gcc-<N> with N read
# from /proc/version; NVIDIA/gpu-driver-container PR #20 installs gcc-12 on Ubuntu 22.04 for kernels >= 5.19).
# Kernels built with the distribution's default gcc name no "gcc-N" and keep the default compiler.
compiler_env=()
kernel_gcc_major="$(sed -n -E 's/.*[^[:alnum:]]gcc-([0-9]+)[^0-9].*/\1/p' "$(root_path /proc/version)")"
if [[ -n "$kernel_gcc_major" ]]; then
  if [[ -z "$(installed_package_version "gcc-$kernel_gcc_major")" ]]; then
    is_ubuntu || die "the kernel was built with gcc-$kernel_gcc_major: no package rule for $GPUFLEET_OS_FAMILY"
    install_packages "gcc-$kernel_gcc_major"
  fi
  compiler_env=("CC=/usr/bin/gcc-$kernel_gcc_major")
  log "building the kernel module with gcc-$kernel_gcc_major, the kernel's compiler"
fi

work="$(build_dir nvidia-driver)"
runfile="$work/NVIDIA-Linux-$GPUFLEET_DRIVER_VERSION.run"
download "$GPUFLEET_DRIVER_URL" "$runfile" "${GPUFLEET_DRIVER_SHA256:-}"
# --no-cc-version-check only matters to older installers such as R450's; from 515.43.04 nvidia-installer accepts and
# ignores it (NVIDIA/nvidia-installer option_table.h: "no longer used"), so a matching CC is what makes the build work.
env "${compiler_env[@]}" sh "$runfile" --silent --dkms --disable-nouveau --no-cc-version-check
log "NVIDIA driver $GPUFLEET_DRIVER_VERSION installed"
