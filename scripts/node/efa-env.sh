#!/usr/bin/env bash
# Writes the EFA/NCCL environment for the aws-ofi-nccl version installed on the image (read from the AMI's
# versions manifest, or what deep-learning-ami.sh read from a Deep Learning AMI) to /etc/profile.d/gpufleet-efa.sh
# (login shells) and /etc/gpufleet/efa.env (systemd EnvironmentFile=, docker --env-file). Which variables a plugin
# version needs: aws-ofi-nccl doc/efa-env-var.md.
# The library path (libfabric, Open MPI, the plugin) goes into efa.env as GPUFLEET_EFA_LIBRARY_PATH, never as
# LD_LIBRARY_PATH: docker --env-file sets values as written, without expansion (docker/cli pkg/kvfile/kvfile.go:
# "no interpolation or substitution"), so an LD_LIBRARY_PATH there would replace the container's own.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

# PREFIX:LIBRARY pairs. The EFA installer puts libfabric and Open MPI in lib64 on Amazon Linux and RHEL, in lib on
# Ubuntu and Debian (EC2 user guide, efa-start-nccl-base "Add the Libfabric directory to LD_LIBRARY_PATH", per OS;
# aws-samples/aws-efa-nccl-baseami-pipeline nvidia-efa-ml-al2.yml and -ubuntu2004.yml profile scripts): the
# directory used is the one that holds the library.
readonly INSTALLED_LIBRARIES=(/opt/amazon/efa:libfabric.so /opt/amazon/openmpi:libmpi.so)

# True when version $1 sorts before version $2.
version_before() { [[ $1 != "$2" && $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1) == "$1" ]]; }

# Prints NAME=VALUE lines for aws-ofi-nccl version $1 on an instance type with ($2=1) or without GPUDirect RDMA.
# <= 1.5.0 needs the provider and protocol forced; before 1.7.0, RDMA must be switched on by hand on p4/p5.
# Never RDMAV_FORK_SAFE (breaks newer kernels), NCCL_MIN_CHANNELS or NCCL_BUFFSIZE (defaults are best).
efa_variables() {
  local version=$1 gpudirect_rdma=$2
  if ! version_before 1.5.0 "$version"; then
    echo FI_PROVIDER=efa
    echo NCCL_PROTO=simple
  fi
  if [[ $gpudirect_rdma == 1 ]] && version_before "$version" 1.7.0; then
    echo FI_EFA_USE_DEVICE_RDMA=1
  fi
}

# Prints $1/lib64 or $1/lib, whichever holds library $2 (any version of it); fails when neither does.
library_dir() {
  local dir
  for dir in "$1/lib64" "$1/lib"; do
    if compgen -G "$root$dir/$2*" >/dev/null; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}

# Writes stdin to $1 through a temporary file, so readers never see half a file.
write_file() {
  mkdir -p "$(dirname "$1")"
  cat >"$1.tmp"
  chmod 0644 "$1.tmp"
  mv -f "$1.tmp" "$1"
}

require_settings "$NODE_SETTINGS" GPUFLEET_EFA
[[ $GPUFLEET_EFA =~ ^[01]$ ]] || die "GPUFLEET_EFA must be 1 or 0, got '$GPUFLEET_EFA'"
if [[ $GPUFLEET_EFA == 0 ]]; then
  log "disabled (GPUFLEET_EFA=0)"
  exit 0
fi
require_settings "$NODE_SETTINGS" GPUFLEET_GPUDIRECT_RDMA
[[ $GPUFLEET_GPUDIRECT_RDMA =~ ^[01]$ ]] || die "GPUFLEET_GPUDIRECT_RDMA must be 1 or 0, got '$GPUFLEET_GPUDIRECT_RDMA'"

root=${GPUFLEET_ROOT:-}
# A Deep Learning AMI (gpufleet/deep_learning_ami.py) carries no versions manifest: its nodes' settings name
# GPUFLEET_VERSIONS_MANIFEST=/etc/gpufleet/deep-learning-ami.json, where the step before this one, deep-learning-ami.sh,
# wrote the plugin's version and directory, found by the DLAMI's layout, in the manifest's form. No other node has the
# setting: any other image without the manifest fails, as before.
manifest=${GPUFLEET_VERSIONS_MANIFEST:-/etc/gpufleet/versions.json}
[[ -f $root$manifest ]] || die "$manifest is missing: the node image was not built by gpufleet (no versions manifest)"
command -v python3 >/dev/null || die "python3 is needed to read $manifest; install it on the image"
# The plugin's directory: paths.aws_ofi_nccl_lib, which images record since the EFA installer may ship the plugin
# (/opt/amazon/ofi-nccl/...); older images built it under GPUFLEET_AWS_OFI_NCCL_PREFIX (default /opt/aws-ofi-nccl).
# scripts/ami/17-validate.sh writes about 1 KB: a manifest over 64 KiB is not one it wrote, and is not read. Each
# value must be a string on one line (the two are read as two lines).
manifest_fields=$(python3 -c '
import json, sys
with open(sys.argv[1], "rb") as handle:
    data = handle.read(65537)
if len(data) > 65536:
    sys.exit(1)
manifest = json.loads(data)
fields = (manifest["components"]["aws_ofi_nccl"], manifest.get("paths", {}).get("aws_ofi_nccl_lib", ""))
if not all(isinstance(field, str) and field.isprintable() for field in fields):
    sys.exit(1)
print(*fields, sep="\n")' "$root$manifest" 2>/dev/null) ||
  die "$manifest is not a versions manifest: expected JSON of at most 64 KiB with components.aws_ofi_nccl," \
    "and paths.aws_ofi_nccl_lib if any, each a string on one line"
{ read -r raw_version; read -r plugin_lib || true; } <<<"$manifest_fields"
plugin_lib=${plugin_lib:-${GPUFLEET_AWS_OFI_NCCL_PREFIX:-/opt/aws-ofi-nccl}/lib}
# Release tags read v1.7.3-aws; compare the numeric part only.
[[ $raw_version =~ ^v?([0-9]+\.[0-9]+(\.[0-9]+)?) ]] ||
  die "components.aws_ofi_nccl in $manifest is '$raw_version', not a version such as 1.7.3"
version=${BASH_REMATCH[1]}

library_path="" program_path=""
for entry in "${INSTALLED_LIBRARIES[@]}"; do
  prefix=${entry%%:*} library=${entry#*:}
  dir=$(library_dir "$prefix" "$library") ||
    die "no $library in $prefix/lib64 or $prefix/lib: the EFA installer did not install it on this image"
  library_path+=$dir:
  program_path+=$prefix/bin:
done
library_path+=$plugin_lib

mapfile -t variables < <(efa_variables "$version" "$GPUFLEET_GPUDIRECT_RDMA")
variables+=("GPUFLEET_EFA_LIBRARY_PATH=$library_path")
header="# Written by gpufleet efa-env.sh for aws-ofi-nccl $raw_version (from $manifest); do not edit."
{
  echo "$header"
  echo "# Containers: mount the directories of GPUFLEET_EFA_LIBRARY_PATH read-only at the same paths and, inside,"
  echo "# prepend it to LD_LIBRARY_PATH (an LD_LIBRARY_PATH in this file would replace the container's own)."
  printf '%s\n' "${variables[@]}"
} | write_file "$root/etc/gpufleet/efa.env"
{
  echo "$header"
  printf 'export %s\n' "${variables[@]}"
  # Once per shell, however often the file is sourced (login shell, then a script that sources it again).
  # shellcheck disable=SC2016 # expanded by the shell that sources the file
  printf '%s\n' 'case ":${LD_LIBRARY_PATH:-}:" in' \
    '  *":$GPUFLEET_EFA_LIBRARY_PATH:"*) ;;' \
    '  *) export LD_LIBRARY_PATH="$GPUFLEET_EFA_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;' \
    'esac'
  # fi_info and Amazon's mpirun: the installer puts their directories on PATH only in its own profile script
  # (/etc/profile.d/zippy_efa.sh, "Please logout/login to complete the installation"), which login shells read and
  # gpufleet's run units and acceptance shells, which source this file, do not.
  printf '%s\n' "case \":\${PATH:-}:\" in" \
    "  *\":${program_path%%:*}:\"*) ;;" \
    "  *) export PATH=\"$program_path\$PATH\" ;;" \
    'esac'
} | write_file "$root/etc/profile.d/gpufleet-efa.sh"
log "wrote the environment for aws-ofi-nccl $raw_version: ${variables[*]%%=*} ($library_path)"
