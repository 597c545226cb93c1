#!/usr/bin/env bash
# Compilers and tools the later steps build with: DKMS modules (driver, EFA, Lustre) need the headers of the
# running kernel; aws-ofi-nccl needs autotools, and hwloc from v1.7.0 (configure.ac CHECK_PKG_HWLOC fails without
# it; its README names hwloc-devel for RPM and libhwloc-dev for DPKG distributions); oneDNN needs cmake; the AWS CLI
# installer is a zip (unzip). python3 reads /etc/gpufleet/versions.json for the node scripts (efa-env.sh) and runs
# the node's topology check: Ubuntu has it, an Amazon Linux 2 base may not.
# Python for the cluster user, on every image: python3 with venv and pip, and uv. A run's --setup makes a virtualenv
# and installs its packages into it (docs/guides/elastic-training.md), and Debian and Ubuntu leave ensurepip out of
# python3 ("ensurepip is not available. On Debian/Ubuntu systems, you need to install the python3-venv package",
# python3 -m venv's own message, seen on a box node, tests/box), so Ubuntu gets python3-venv and python3-pip; Amazon
# Linux's python3 carries venv and ensurepip itself (unconfirmed), python3-pip is its pip. 17-validate.sh proves a
# `python3 -m venv` and its pip work. uv: the profile's release tarball into /usr/local/bin, checked against the
# profile's sha256 and the digest the release publishes beside it (URL.sha256).
# With a profile pytorch option (GPUFLEET_PYTORCH_VERSION set): PyTorch at that version from its wheel index in a
# virtualenv at /opt/gpufleet/pytorch, root's and world-readable, made by uv (which needs no ensurepip) with
# GPUFLEET_PYTORCH_PYTHON's interpreter (python3.X, from the OS packages) or python3.
# Amazon Linux 2023 ships curl-minimal and gnupg2-minimal, which conflict with curl and gnupg2 (dnf refuses to replace
# them without --allowerasing), so those are what it gets (unconfirmed: from the AL2023 user guide's package notes).
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION GPUFLEET_UV_VERSION GPUFLEET_UV_URL GPUFLEET_UV_SHA256
kernel="$(uname -r)"
pytorch_python=python3
[[ -z "${GPUFLEET_PYTORCH_PYTHON:-}" ]] || pytorch_python="python$GPUFLEET_PYTORCH_PYTHON"

if is_ubuntu; then
  packages=(build-essential gcc make dkms "linux-headers-$kernel" autoconf automake libtool libhwloc-dev git jq cmake
    curl ca-certificates gnupg pciutils python3 python3-venv python3-pip unzip)
else
  kernel_version="${kernel%.x86_64}"
  kernel_version="${kernel_version%.aarch64}"
  packages=(gcc gcc-c++ make dkms "kernel-devel-$kernel_version" "kernel-headers-$kernel_version" autoconf automake
    libtool hwloc-devel git jq cmake3 curl gnupg2 pciutils tar gzip python3 python3-pip unzip)
  if [[ "$GPUFLEET_OS_VERSION" != 2 ]]; then
    packages=("${packages[@]/cmake3/cmake}")
    packages=("${packages[@]/#curl/curl-minimal}")
    packages=("${packages[@]/#gnupg2/gnupg2-minimal}")
  fi
fi
[[ "$pytorch_python" == python3 ]] || packages+=("$pytorch_python")
missing=()
for package in "${packages[@]}"; do
  [[ -n "$(installed_package_version "$package")" ]] || missing+=("$package")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  log "build tools already installed"
else
  if is_ubuntu; then
    apt_get update -q
  elif [[ "$GPUFLEET_OS_VERSION" == 2 ]]; then
    amazon-linux-extras install -y epel # dkms comes from EPEL on Amazon Linux 2
  fi
  install_packages "${missing[@]}"
  if is_ubuntu; then apt-mark hold "linux-headers-$kernel"; fi
  log "build tools installed: ${missing[*]}"
fi

uv_dir="$(root_path "$UV_BIN_DIR")"
if ! already_at uv "$(installed_uv_version)" "$GPUFLEET_UV_VERSION"; then
  work="$(build_dir uv)"
  tarball="$work/$(basename "$GPUFLEET_UV_URL")"
  download "$GPUFLEET_UV_URL" "$tarball" "$GPUFLEET_UV_SHA256"
  curl "${CURL_RETRY_FLAGS[@]}" --output "$tarball.sha256" "$GPUFLEET_UV_URL.sha256" ||
    die "download failed after retries: $GPUFLEET_UV_URL.sha256"
  published="$(awk '{print $1; exit}' "$tarball.sha256")"
  [[ "$published" == "$GPUFLEET_UV_SHA256" ]] ||
    die "uv $GPUFLEET_UV_VERSION: the release publishes sha256 ${published:-nothing}, the profile pins $GPUFLEET_UV_SHA256"
  unpacked="$(extract_single_dir "$tarball" "$work/src")"
  mkdir -p "$uv_dir"
  install -m 0755 "$unpacked/uv" "$unpacked/uvx" "$uv_dir/"
  found="$(installed_uv_version)"
  version_matches "$found" "$GPUFLEET_UV_VERSION" ||
    die "the tarball left uv ${found:-nothing} at $UV_BIN_DIR/uv, expected $GPUFLEET_UV_VERSION"
  log "uv $GPUFLEET_UV_VERSION installed ($UV_BIN_DIR/uv, uvx)"
fi

if [[ -z "${GPUFLEET_PYTORCH_VERSION:-}" ]]; then
  log "no PyTorch in this profile"
  exit 0
fi
require_env GPUFLEET_PYTORCH_INDEX_URL
already_at PyTorch "$(installed_pytorch_version)" "$GPUFLEET_PYTORCH_VERSION" && exit 0
interpreter="$(command -v "$pytorch_python")" || die "no $pytorch_python for the PyTorch virtualenv"
venv="$(root_path "$PYTORCH_VENV")"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
umask 022
"$uv_dir/uv" venv --seed --python "$interpreter" "$venv"
"$uv_dir/uv" pip install --python "$venv/bin/python" --index-url "$GPUFLEET_PYTORCH_INDEX_URL" \
  "torch==$GPUFLEET_PYTORCH_VERSION"
chmod -R a+rX,go-w "$venv"
found="$(installed_pytorch_version)"
version_matches "$found" "$GPUFLEET_PYTORCH_VERSION" ||
  die "the virtualenv $PYTORCH_VENV holds torch ${found:-nothing}, expected $GPUFLEET_PYTORCH_VERSION"
log "PyTorch $found installed in $PYTORCH_VENV ($pytorch_python)"
