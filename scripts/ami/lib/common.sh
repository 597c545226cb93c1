# shellcheck shell=bash
# shellcheck disable=SC2034 # the constants below are read by the scripts that source this file
# Helpers shared by every scripts/ami/NN-*.sh provisioning script; sourced, never run.
#
# Getting this file onto the build instance: Packer's shell provisioner uploads each script alone (as
# /tmp/script_NNNN.sh), so the rendered template must, before the first script:
#   1. shell provisioner, inline: ["mkdir -p /var/tmp/gpufleet-lib"]
#   2. file provisioner: source = "scripts/ami/lib/", destination = "/var/tmp/gpufleet-lib"
#      (trailing slash on source: the directory's contents land in the destination)
#   3. every shell provisioner: environment_vars include "GPUFLEET_LIB_DIR=/var/tmp/gpufleet-lib"
# and, after 17-validate.sh, an inline step: ["sudo rm -rf /var/tmp/gpufleet-lib"].
# /var/tmp, not /tmp: /tmp is emptied by the 03-reboot.sh barrier. Without GPUFLEET_LIB_DIR a script finds
# this file in lib/ next to itself (a checkout, the tests).
#
# GPUFLEET_ROOT (default empty) prefixes every file-system path the scripts read or write, so tests can
# point /etc, /opt, /usr/local, /sys and /var at a temporary tree.

readonly GPUFLEET_BUILD_DIR=/var/tmp/gpufleet-build
readonly CURL_RETRY_FLAGS=(--retry 5 --retry-connrefused --retry-delay 5 --fail --location --silent --show-error)

log() { printf '[gpufleet] %s\n' "$*"; }
warn() { printf '[gpufleet] WARNING: %s\n' "$*" >&2; }
die() {
  printf '[gpufleet] ERROR: %s\n' "$*" >&2
  exit 1
}

# root_path PATH: PATH inside the tree the scripts act on (GPUFLEET_ROOT, empty on a real build).
root_path() { printf '%s%s' "${GPUFLEET_ROOT:-}" "$1"; }

# require_env NAME...: every named variable must be set and non-empty; one line per missing variable.
require_env() {
  local name missing=0
  for name in "$@"; do
    if [[ -z "${!name:-}" ]]; then
      printf '[gpufleet] ERROR: missing required environment variable %s (the Packer template sets it from the AMI profile)\n' \
        "$name" >&2
      missing=1
    fi
  done
  [[ $missing -eq 0 ]] || exit 1
  if [[ " $* " == *" GPUFLEET_OS_FAMILY "* && ! "$GPUFLEET_OS_FAMILY" =~ ^(ubuntu|amzn)$ ]]; then
    die "GPUFLEET_OS_FAMILY must be ubuntu or amzn, got '$GPUFLEET_OS_FAMILY'"
  fi
}

is_ubuntu() { [[ "$GPUFLEET_OS_FAMILY" == ubuntu ]]; }

# The amzn package manager: yum on Amazon Linux 2, dnf on 2023.
amzn_package_manager() { if [[ "$GPUFLEET_OS_VERSION" == 2 ]]; then echo yum; else echo dnf; fi; }

# major.minor of a dotted version: 11.0.3 -> 11.0
major_minor() { local IFS=.; read -r -a parts <<<"$1"; printf '%s.%s' "${parts[0]}" "${parts[1]:-0}"; }

# version_before A B: true when dotted version A sorts before B (1.1.1 before 1.4.0 before 1.16.3).
version_before() { [[ "$1" != "$2" && "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" == "$1" ]]; }

# version_matches FOUND PINNED: FOUND is PINNED, or PINNED plus a packaging suffix (epoch N: dropped;
# -release, +build, ~tag appended), so "1:450.80.02-1" matches "450.80.02" but "450.80.021" does not.
version_matches() {
  local found="${1#*:}" pinned="$2"
  [[ -n "$found" ]] || return 1
  [[ "$found" == "$pinned" || "$found" == "$pinned"[-+~]* ]]
}

# already_at COMPONENT FOUND PINNED: true (and says so) when FOUND matches PINNED.
already_at() {
  if version_matches "$2" "$3"; then
    log "$1 already at $3: nothing to do"
    return 0
  fi
  return 1
}

# installed_package_version NAME: the installed version of an OS package, empty when it is not installed.
installed_package_version() {
  if is_ubuntu; then
    { dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null || true; } | awk '$3 == "installed" {print $4}'
  else
    { rpm -q --qf '%{VERSION}-%{RELEASE}\n' "$1" 2>/dev/null || true; } | awk '!/not installed/'
  fi
}

# apt_get ARGS...: apt-get, non-interactive, waiting up to APT_LOCK_TIMEOUT seconds for the dpkg lock instead of
# failing at once with "Could not get lock /var/lib/dpkg/lock-frontend". DPkg::Lock::Timeout exists from apt
# 1.9.11 (Debian apt changelog: "apt(8): Wait for lock"), so Ubuntu 22.04 honours it; Ubuntu 18.04's apt 1.6
# predates it and takes it as an unused setting (unconfirmed), which is why 00-os-update.sh first waits for
# cloud-init and stops the apt-daily timers.
readonly APT_LOCK_TIMEOUT=600
apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT" "$@"; }

# install_packages NAME...: OS packages the profile does not version (build tools, from the image's repos).
install_packages() {
  if is_ubuntu; then
    apt_get install -y -q --no-install-recommends "$@"
  else
    "$(amzn_package_manager)" install -y -q "$@"
  fi
}

# install_pinned NAME VERSION [NAME VERSION ...]: each package at exactly VERSION (apt name=VERSION,
# yum/dnf name-VERSION); never an unversioned install.
install_pinned() {
  local specs=()
  while [[ $# -gt 0 ]]; do
    [[ -n "${2:-}" ]] || die "install_pinned: package $1 has no version"
    if is_ubuntu; then specs+=("$1=$(apt_candidate "$1" "$2")"); else specs+=("$1-$2"); fi
    shift 2
  done
  log "installing ${specs[*]}"
  if is_ubuntu; then
    apt_get install -y -q --no-install-recommends --allow-downgrades "${specs[@]}"
  else
    "$(amzn_package_manager)" install -y -q "${specs[@]}"
  fi
}

# apt_candidate NAME VERSION: the repository version of NAME that is VERSION exactly, else the first that
# version_matches it (450.80.02 -> 450.80.02-1); fails when the configured repositories have none.
apt_candidate() {
  local candidate
  candidate="$(apt-cache madison "$1" 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' |
    while read -r version; do
      if [[ "$version" == "$2" ]] || version_matches "$version" "$2"; then
        printf '%s\n' "$version"
        break
      fi
    done)"
  [[ -n "$candidate" ]] || die "no version $2 of package $1 in the configured apt repositories"
  printf '%s' "$candidate"
}

# add_apt_repository NAME KEY_URL "URI SUITE [COMPONENT...]": a signed-by apt source (key fetched over HTTPS,
# apt then checks every package against it), followed by an index update. Does nothing when already there.
add_apt_repository() {
  local name="$1" key_url="$2" source="$3" keyring list
  keyring="$(root_path "/usr/share/keyrings/$name.gpg")"
  list="$(root_path "/etc/apt/sources.list.d/$name.list")"
  [[ -f "$list" ]] && return 0
  curl "${CURL_RETRY_FLAGS[@]}" "$key_url" | gpg --batch --yes --dearmor --output "$keyring"
  printf 'deb [signed-by=%s] %s\n' "/usr/share/keyrings/$name.gpg" "$source" >"$list"
  apt_get update -q
}

# add_yum_repository FILE_URL: a vendor .repo file (it names its gpgkey; yum/dnf check packages against it).
add_yum_repository() {
  local repo_file
  repo_file="$(root_path "/etc/yum.repos.d/$(basename "$1")")"
  [[ -f "$repo_file" ]] && return 0
  curl "${CURL_RETRY_FLAGS[@]}" --output "$repo_file" "$1"
}

# add_repositories KEY: the repositories ami/packages.yaml lists for package key KEY, from
# GPUFLEET_<KEY>_REPOSITORIES (";"-separated "KEY_URL|APT_SOURCE" entries or yum .repo file URLs; may be empty).
add_repositories() {
  local variable="GPUFLEET_${1^^}_REPOSITORIES" entries entry index=0
  IFS=';' read -r -a entries <<<"${!variable:-}"
  for entry in "${entries[@]}"; do
    index=$((index + 1))
    if [[ "$entry" == *"|"* ]]; then
      add_apt_repository "gpufleet-${1//_/-}-$index" "${entry%%|*}" "${entry#*|}"
    else
      add_yum_repository "$entry"
    fi
  done
}

# ensure_cuda_repository: NVIDIA's CUDA repository, the source of the pinned Fabric Manager, cuDNN and NCCL packages.
ensure_cuda_repository() {
  local base=https://developer.download.nvidia.com/compute/cuda/repos
  if is_ubuntu; then
    local distro="ubuntu${GPUFLEET_OS_VERSION//./}"
    add_apt_repository gpufleet-cuda "$base/$distro/x86_64/3bf863cc.pub" "$base/$distro/x86_64/ /"
  elif [[ "$GPUFLEET_OS_VERSION" == 2 ]]; then
    add_yum_repository "$base/rhel7/x86_64/cuda-rhel7.repo"
  else
    add_yum_repository "$base/amzn2023/x86_64/cuda-amzn2023.repo"
  fi
}

# package_version_string VERSION: the distribution package version for an upstream version (1.14.3 -> 1.14.3-1);
# a version that already carries a release suffix is used as given.
package_version_string() { if [[ "$1" == *-* ]]; then echo "$1"; else echo "$1-1"; fi; }

# build_dir COMPONENT: a fresh, empty scratch directory for one component (16-cleanup.sh removes them all).
build_dir() {
  local dir
  dir="$(root_path "$GPUFLEET_BUILD_DIR")/$1"
  rm -rf "$dir"
  mkdir -p "$dir"
  printf '%s' "$dir"
}

# download URL DEST SHA256: fetch with retries; verify against SHA256, or warn loudly when the profile gives
# none. A mismatch removes DEST and fails: nothing unverified is ever installed when a checksum exists.
download() {
  local url="$1" dest="$2" sha256="$3" actual
  log "downloading $url"
  curl "${CURL_RETRY_FLAGS[@]}" --output "$dest" "$url" || die "download failed after retries: $url"
  if [[ -z "$sha256" ]]; then
    warn "the profile gives no sha256 for $url: installing an UNVERIFIED download"
    return 0
  fi
  if ! printf '%s  %s\n' "$sha256" "$dest" | sha256sum -c --status -; then
    actual="$(sha256sum "$dest" | awk '{print $1}')"
    rm -f "$dest"
    die "sha256 mismatch for $url: expected $sha256, got $actual"
  fi
  log "sha256 verified for $(basename "$dest")"
}

# Vendor keys gpufleet ships, as KEYS_DIR/FINGERPRINT.asc, for downloads whose vendor publishes its key only on a
# web page (the AWS CLI's). They travel with this library (the template uploads lib/ with its subdirectories).
KEYS_DIR="$(dirname "${BASH_SOURCE[0]}")/keys"
readonly KEYS_DIR

# verify_signature FILE SIGNATURE KEY [FINGERPRINT]: SIGNATURE (detached) must be a good signature of FILE by the
# public key(s) in the file KEY, checked in a keyring of its own. With FINGERPRINT (40 hex digits, as the vendor
# publishes it) the signing key's primary key must be that one: VALIDSIG ends with it (gpg doc/DETAILS), so another
# key the file may carry is refused. An expired key gives EXPKEYSIG, not GOODSIG: refused, with the reason.
verify_signature() {
  local file="$1" signature="$2" key="$3" fingerprint="${4:-}" status
  export GNUPGHOME
  GNUPGHOME="$(dirname "$file")/gnupg"
  rm -rf "$GNUPGHOME"
  mkdir -m 700 "$GNUPGHOME"
  gpg --batch --quiet --import "$key"
  status="$(gpg --batch --status-fd 1 --verify "$signature" "$file" 2>/dev/null)" || true
  if grep -q '^\[GNUPG:\] EXPKEYSIG ' <<<"$status"; then
    die "the key that signed $(basename "$file") has expired in $key: get the vendor's current key"
  fi
  grep -q '^\[GNUPG:\] GOODSIG ' <<<"$status" || die "GPG signature check failed for $(basename "$file")"
  if [[ -n "$fingerprint" ]] && ! grep -Eq "^\[GNUPG:\] VALIDSIG .* $fingerprint\$" <<<"$status"; then
    die "$(basename "$file") is not signed by the key $fingerprint"
  fi
  log "GPG signature verified for $(basename "$file")${fingerprint:+ (key $fingerprint)}"
}

# fetch_source COMPONENT URL SHA256: download a release tarball into COMPONENT's fresh build directory, verify
# it, unpack it and print the directory it unpacked to (download's log goes to stderr, the build log too).
# Called inside $(...), where bash drops errexit: every step returns on failure explicitly.
fetch_source() {
  local work tarball
  work="$(build_dir "$1")" || return
  tarball="$work/$(basename "$2")"
  download "$2" "$tarball" "$3" >&2 || return
  extract_single_dir "$tarball" "$work/src"
}

# extract_single_dir TARBALL DEST: unpack a release tarball and print the one top-level directory it made.
extract_single_dir() {
  local tarball="$1" dest="$2" entries
  mkdir -p "$dest"
  tar -xf "$tarball" -C "$dest"
  entries=("$dest"/*/)
  [[ ${#entries[@]} -eq 1 && -d "${entries[0]}" ]] || die "$tarball does not unpack to a single directory"
  printf '%s' "${entries[0]%/}"
}

# header_version FILE MAJOR_MACRO MINOR_MACRO PATCH_MACRO: "M.m.p" from #define lines, empty when absent.
header_version() {
  local file="$1" macro value parts=()
  [[ -f "$file" ]] || return 0
  for macro in "$2" "$3" "$4"; do
    value="$(awk -v m="$macro" '$1 == "#define" && $2 == m {print $3; exit}' "$file")"
    [[ -n "$value" ]] || return 0
    parts+=("$value")
  done
  printf '%s.%s.%s' "${parts[@]}"
}

# --- Where each component lives and how its installed version is read (shared by installers and 17-validate) --

readonly CUDA_LINK=/usr/local/cuda
readonly NCCL_SOURCE_PREFIX=/opt/nccl
readonly AWS_OFI_NCCL_PREFIX=/opt/aws-ofi-nccl
# Where EFA installers >= 1.39 install their own aws-ofi-nccl (the profile then builds none).
readonly EFA_OFI_NCCL_PREFIX=/opt/amazon/ofi-nccl
# The name NCCL dlopen()s its net plugin by: src/init.cc at v2.7.8-1, src/plugin/plugin_open.cc at v2.27.7-1.
readonly NCCL_NET_PLUGIN=libnccl-net.so
readonly NCCL_TESTS_PREFIX=/opt/nccl-tests
readonly ONEDNN_PREFIX=/opt/onednn
readonly EFA_INSTALLED_PACKAGES=/opt/amazon/efa_installed_packages
# Installed-version markers for components built from source, written only after a successful install.
readonly VERSION_MARKER_NAME=gpufleet-version
readonly NCCL_TESTS_BINARIES=(all_reduce_perf all_gather_perf broadcast_perf reduce_scatter_perf)

cuda_prefix() { printf '/usr/local/cuda-%s' "$(major_minor "$GPUFLEET_CUDA_VERSION")"; }

# installed_cuda_version: cuda.version of version.json (CUDA >= 11.1, full X.Y.Z), else "X.Y" from nvcc.
installed_cuda_version() {
  local version_json nvcc
  version_json="$(root_path "$CUDA_LINK/version.json")"
  if [[ -f "$version_json" ]]; then
    tr -d '\n' <"$version_json" |
      sed -n -E 's/.*"cuda"[[:space:]]*:[[:space:]]*\{[^}]*"version"[[:space:]]*:[[:space:]]*"([^"]+)".*/\1/p'
    return 0
  fi
  nvcc="$(root_path "$CUDA_LINK/bin/nvcc")"
  [[ -x "$nvcc" ]] || nvcc="$(command -v nvcc || true)"
  [[ -n "$nvcc" ]] || return 0
  { "$nvcc" --version 2>/dev/null || true; } | sed -n -E 's/.*release ([0-9]+\.[0-9]+).*/\1/p' | head -n 1
}

# cuda_matches FOUND: a full X.Y.Z must equal the pin; nvcc's X.Y (CUDA 11.0 has no version.json) its major.minor.
cuda_matches() {
  [[ "$1" == "$GPUFLEET_CUDA_VERSION" ]] || [[ "$1" =~ ^[0-9]+\.[0-9]+$ && "$1" == "$(major_minor "$GPUFLEET_CUDA_VERSION")" ]]
}

# installed_cudnn_version: M.m.p from the first cuDNN header found (tarball or packages, cuDNN 7 or 8+).
installed_cudnn_version() {
  local header version
  for header in "$CUDA_LINK/include/cudnn_version.h" /usr/include/cudnn_version.h \
    /usr/include/x86_64-linux-gnu/cudnn_version_v[0-9]*.h "$CUDA_LINK/include/cudnn.h" /usr/include/cudnn.h; do
    version="$(header_version "$(root_path "$header")" CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL)"
    if [[ -n "$version" ]]; then
      printf '%s' "$version"
      return 0
    fi
  done
}

# The NCCL tree aws-ofi-nccl and nccl-tests build against: the source build's prefix, else the packages' /usr.
nccl_home() { if [[ -f "$(root_path "$NCCL_SOURCE_PREFIX/include/nccl.h")" ]]; then echo "$NCCL_SOURCE_PREFIX"; else echo /usr; fi; }

installed_nccl_version() { header_version "$(root_path "$(nccl_home)/include/nccl.h")" NCCL_MAJOR NCCL_MINOR NCCL_PATCH; }

# first_fields VERSION N: the first N dot-separated fields with any -release dropped (8.0.5.39 3 -> 8.0.5).
first_fields() { printf '%s' "${1%%-*}" | cut -d. -f"1-$2"; }

installed_efa_installer_version() {
  local file
  file="$(root_path "$EFA_INSTALLED_PACKAGES")"
  [[ -f "$file" ]] || return 0
  sed -n -E 's/^# EFA installer version: *([^ ]+).*/\1/p' "$file" | head -n 1
}

# marker_version PREFIX: the version a source build recorded in PREFIX/gpufleet-version, empty when absent.
marker_version() {
  local marker
  marker="$(root_path "$1/$VERSION_MARKER_NAME")"
  [[ -f "$marker" ]] && tr -d '[:space:]' <"$marker"
  return 0
}

# nccl_net_plugins DIR...: every file or link named libnccl-net.so under the DIRs, one image path per line.
nccl_net_plugins() {
  local root="${GPUFLEET_ROOT:-}" dir path
  for dir in "$@"; do
    [[ -d "$root$dir" ]] || continue
    while IFS= read -r path; do
      printf '%s\n' "${path#"$root"}"
    done < <(find "$root$dir" -name "$NCCL_NET_PLUGIN" \( -type f -o -type l \) | sort)
  done
}

# ofi_nccl_library_version LIBRARY: the release an aws-ofi-nccl library names in its "Initializing " PACKAGE_STRING
# message (src/nccl_ofi_net.c from v1.10.0, e.g. "Initializing aws-ofi-nccl 1.16.3"); empty when it names none.
ofi_nccl_library_version() {
  local message
  message="$(grep -a -o -m 1 -E 'Initializing aws-ofi-nccl [0-9][^[:space:][:cntrl:]]*' "$1" 2>/dev/null)" || return 0
  printf '%s' "${message##* }"
}

# loader_resolves NAME: the path(s) the dynamic loader's cache (ldconfig -p) gives for NAME, one per line.
loader_resolves() { { ldconfig -p 2>/dev/null || true; } | awk -v name="$1" '$1 == name {print $NF}'; }

write_marker() { printf '%s\n' "$2" >"$(root_path "$1/$VERSION_MARKER_NAME")"; }

installed_onednn_version() {
  local header version
  for header in "$ONEDNN_PREFIX/include/oneapi/dnnl/dnnl_version.h" "$ONEDNN_PREFIX/include/dnnl_version.h"; do
    version="$(header_version "$(root_path "$header")" DNNL_VERSION_MAJOR DNNL_VERSION_MINOR DNNL_VERSION_PATCH)"
    if [[ -n "$version" ]]; then
      printf '%s' "$version"
      return 0
    fi
  done
}

# AWS CLI v2 where its installer puts it by default (user guide: --install-dir /usr/local/aws-cli, --bin-dir
# /usr/local/bin).
readonly AWS_CLI_INSTALL_DIR=/usr/local/aws-cli
readonly AWS_CLI_BIN_DIR=/usr/local/bin

# installed_aws_cli_version: X.Y.Z from `aws --version` ("aws-cli/2.36.11 Python/3.13.4 Linux/..."), empty when the
# v2 installer's aws is not there.
installed_aws_cli_version() {
  local aws
  aws="$(root_path "$AWS_CLI_BIN_DIR/aws")"
  [[ -x "$aws" ]] || return 0
  { "$aws" --version 2>&1 || true; } | sed -n -E 's|^aws-cli/([0-9][^ ]*).*|\1|p' | head -n 1
}

# The agent's files: the package installs under /opt/aws/amazon-cloudwatch-agent and records the build it is in
# bin/CWAGENT_VERSION (aws/amazon-cloudwatch-agent Makefile and packaging/linux/amazon-cloudwatch-agent.spec).
readonly CLOUDWATCH_AGENT_DIR=/opt/aws/amazon-cloudwatch-agent
readonly CLOUDWATCH_AGENT_PACKAGE=amazon-cloudwatch-agent

installed_cloudwatch_agent_version() {
  local file
  file="$(root_path "$CLOUDWATCH_AGENT_DIR/bin/CWAGENT_VERSION")"
  [[ -f "$file" ]] && tr -d '[:space:]' <"$file"
  return 0
}

# cloudwatch_agent_matches FOUND: the pin is the build's S3 directory (1.300071.0b1720); CWAGENT_VERSION may hold that
# or the release alone (1.300071.0) (unconfirmed which).
cloudwatch_agent_matches() {
  [[ -n "$1" ]] && { [[ "$1" == "$GPUFLEET_CLOUDWATCH_AGENT_VERSION" ]] || [[ "$GPUFLEET_CLOUDWATCH_AGENT_VERSION" == "$1"b* ]]; }
}

# uv from its release tarball (01-build-tools.sh), and the profile's PyTorch virtualenv (gpufleet/ami/__init__.py
# PYTORCH_VENV), root's and world-readable: `gpufleet run` puts its bin/ first on PATH (docs/guides/running-jobs.md).
readonly UV_BIN_DIR=/usr/local/bin
readonly PYTORCH_VENV=/opt/gpufleet/pytorch

# installed_uv_version: X.Y.Z from `uv --version` ("uv 0.12.21 (0a1b2c3d4 2026-09-01)"), empty without it.
installed_uv_version() {
  local uv
  uv="$(root_path "$UV_BIN_DIR/uv")"
  [[ -x "$uv" ]] || return 0
  { "$uv" --version 2>/dev/null || true; } | sed -n -E 's/^uv ([0-9][^ ]*).*/\1/p' | head -n 1
}

# installed_pytorch_version: torch.__version__ in the PyTorch virtualenv ("2.14.0+cu130"), empty without it.
installed_pytorch_version() {
  local python
  python="$(root_path "$PYTORCH_VENV/bin/python")"
  [[ -x "$python" ]] || return 0
  { "$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true; } | head -n 1
}

readonly FABRIC_MANAGER_SERVICE=nvidia-fabricmanager
# The SSM agent's unit: the amazon-ssm-agent package's on Amazon Linux 2, the snap's on Ubuntu's AWS images (the
# snap's services are named snap.SNAP.APP.service: snapcraft.io/docs/services-and-daemons). gpufleet run,
# acceptance and the checkpoint hook reach nodes only through Run Command, so an image whose agent is not started at
# boot makes nodes nothing can drive. The base images come with it (the build itself reaches the instance through
# Session Manager, which needs the agent running); the check keeps a later step from disabling it.
readonly SSM_AGENT_SERVICES=(amazon-ssm-agent snap.amazon-ssm-agent.amazon-ssm-agent)

# efa_device_present: an Amazon EFA device (PCI vendor 0x1d0f) is visible through the RDMA subsystem.
efa_device_present() {
  local vendor
  for vendor in "$(root_path /sys/class/infiniband)"/*/device/vendor; do
    [[ -f "$vendor" && "$(<"$vendor")" == 0x1d0f ]] && return 0
  done
  return 1
}
